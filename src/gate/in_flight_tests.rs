use super::*;

#[test]
fn commands_on_a_session_that_ends_unanswered_are_handed_back_in_order() {
    let mut in_flight = InFlight::default();
    in_flight.sent(7, "S1");
    in_flight.sent(5, "S1");
    in_flight.sent(6, "S2");
    assert!(in_flight.answered(5));
    assert_eq!(in_flight.ended("S1"), vec![7]);
    // Handed back once: a second detach of the same session owes nothing.
    assert!(in_flight.ended("S1").is_empty());
    // Another session's command is still awaited, and passes when answered.
    assert!(in_flight.has_ended("S1") && !in_flight.has_ended("S2"));
    assert!(in_flight.answered(6));
}

#[test]
fn chromiums_late_answer_to_a_command_the_gate_answered_is_not_passed_on() {
    let mut in_flight = InFlight::default();
    in_flight.sent(9, "S1");
    assert_eq!(in_flight.ended("S1"), vec![9]);
    assert!(in_flight.waiting());
    assert!(!in_flight.answered(9));
    // Held back once only; nothing is left to wait for.
    assert!(!in_flight.waiting());
    assert!(in_flight.answered(9));
}

#[test]
fn unanswered_commands_are_tracked_up_to_a_bound() {
    let mut in_flight = InFlight::default();
    for id in 0..(MAX_PENDING as u64 + 10) {
        in_flight.sent(id, "S1");
    }
    assert_eq!(in_flight.pending.len(), MAX_PENDING);
    assert_eq!(in_flight.ended("S1").len(), MAX_PENDING);
}

#[test]
fn ended_sessions_are_remembered_up_to_a_bound() {
    let mut in_flight = InFlight::default();
    for n in 0..=REMEMBERED {
        in_flight.ended(&format!("S{n}"));
    }
    assert!(!in_flight.has_ended("S0"));
    assert!(in_flight.has_ended(&format!("S{REMEMBERED}")));
    assert_eq!(in_flight.ended.members.len(), REMEMBERED);
}

#[test]
fn an_answers_id_is_read_in_chromiums_form_and_in_any_other() {
    assert_eq!(answer_id(r#"{"id":42,"result":{}}"#), Some(42));
    assert_eq!(answer_id(r#"{"result":{},"id":43}"#), Some(43));
    assert_eq!(
        answer_id(r#"{"method":"Page.loadEventFired","params":{}}"#),
        None
    );
    assert_eq!(answer_id("not json"), None);
}
