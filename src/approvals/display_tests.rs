use super::{Button, wrap};

#[test]
fn wrapping_breaks_at_spaces_and_cuts_only_words_longer_than_a_line() {
    assert_eq!(wrap("one two three", 7), ["one two", "three"]);
    assert_eq!(wrap("a\nb c", 80), ["a", "b c"]);
    assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
    assert_eq!(wrap("Pay 12 €", 80), ["Pay 12 €"]);
}

#[test]
fn a_click_counts_only_inside_the_button() {
    let button = Button {
        x: 10,
        y: 20,
        width: 30,
        height: 5,
    };
    assert!(button.holds(10, 20) && button.holds(39, 24));
    assert!(!button.holds(40, 20) && !button.holds(10, 25) && !button.holds(9, 22));
}
