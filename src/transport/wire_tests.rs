use super::*;

/// What reached rmcp (each message serialised back, one per line), what
/// the wire answered, and the faults it reported.
async fn run(input: &[u8]) -> (String, String, Vec<Fault>) {
    let (to_server, mut server_side) = mpsc::channel(16);
    let (tx, mut rx) = mpsc::channel(16);
    let faults = std::sync::Mutex::new(Vec::new());
    pump_input(input, to_server, tx, Arc::default(), |f| {
        faults.lock().unwrap().push(f.clone())
    })
    .await;
    let mut passed = String::new();
    while let Ok(message) = server_side.try_recv() {
        passed.push_str(&serde_json::to_string(&message).unwrap());
        passed.push('\n');
    }
    let mut answered = String::new();
    while let Ok(line) = rx.try_recv() {
        answered.push_str(&line);
        answered.push('\n');
    }
    (passed, answered, faults.into_inner().unwrap())
}

#[tokio::test]
async fn valid_messages_reach_rmcp_parsed_and_unchanged() {
    let msg = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\
               \"params\":{\"name\":\"browser-shell\",\"arguments\":{\"argv\":[\"get\",\"url\"]}}}\n";
    let (passed, answered, faults) = run(msg.as_bytes()).await;
    let passed: Value = serde_json::from_str(&passed).unwrap();
    assert_eq!(passed, serde_json::from_str::<Value>(msg).unwrap());
    assert_eq!(answered, "");
    assert!(faults.is_empty());
}

#[tokio::test]
async fn garbage_gets_a_parse_error_with_a_null_id() {
    let (passed, answered, faults) = run(b"{not json\n").await;
    assert_eq!(passed, "");
    let reply: Value = serde_json::from_str(answered.trim()).unwrap();
    assert_eq!(reply["error"]["code"], -32700);
    assert_eq!(reply["id"], Value::Null);
    assert_eq!(faults[0].rule, "jsonrpc.parse_error");
}

#[tokio::test]
async fn a_wrong_shape_is_answered_with_its_id() {
    let (_, answered, faults) =
        run(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":\"x\"}\n").await;
    let reply: Value = serde_json::from_str(answered.trim()).unwrap();
    assert_eq!(reply["error"]["code"], -32600);
    assert_eq!(reply["id"], 5);
    assert_eq!(faults[0].request_id.as_deref(), Some("5"));
}

#[tokio::test]
async fn a_tools_call_without_a_tool_name_is_invalid_params() {
    for bad in [
        "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"tools/call\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"tools/call\",\"params\":{\"name\":5}}",
        "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"tools/call\",\"params\":{\"name\":\"browser-shell\",\"arguments\":[]}}",
    ] {
        let (passed, answered, faults) = run(format!("{bad}\n").as_bytes()).await;
        assert_eq!(passed, "", "{bad}");
        let reply: Value = serde_json::from_str(answered.trim()).unwrap();
        assert_eq!(reply["error"]["code"], -32602, "{bad}");
        assert_eq!(reply["id"], "a");
        assert_eq!(faults[0].rule, "jsonrpc.invalid_params");
    }
}

#[tokio::test]
async fn a_message_rmcp_cannot_take_is_answered_with_its_id() {
    // Well-formed JSON-RPC, but `_meta` must be an object.
    let bad = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{\"_meta\":5}}\n";
    let (passed, answered, faults) = run(bad.as_bytes()).await;
    assert_eq!(passed, "");
    let reply: Value = serde_json::from_str(answered.trim()).unwrap();
    assert_eq!(reply["error"]["code"], -32600);
    assert_eq!(reply["id"], 7);
    assert_eq!(faults[0].rule, "jsonrpc.invalid_request");
}

#[tokio::test]
async fn rmcp_messages_go_out_whole_one_per_line() {
    let (mut wire, ends) = Wire::new(crate::obs::telemetry::Telemetry::disabled());
    let (mut client, server_out) = tokio::io::duplex(1024 * 1024);
    let answers_tx = ends.answers_tx;
    let writer = tokio::spawn(pump_output(ends.from_server, ends.answers_rx, server_out));
    let response: TxJsonRpcMessage<RoleServer> =
        serde_json::from_str("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"tools\":[]}}").unwrap();
    wire.send(response).await.unwrap();
    answers_tx.send("{\"answer\":1}".to_owned()).await.unwrap();
    drop((wire, answers_tx, ends.to_server));
    writer.await.unwrap();
    let mut out = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut client, &mut out)
        .await
        .unwrap();
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines.contains(&json!({"jsonrpc": "2.0", "id": 3, "result": {"tools": []}})));
    assert!(lines.contains(&json!({"answer": 1})));
}

#[tokio::test]
async fn an_oversized_line_is_refused_and_the_next_one_still_served() {
    let mut input = vec![b'x'; MAX_MESSAGE_BYTES + 10];
    input.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    let (passed, answered, faults) = run(&input).await;
    assert_eq!(faults[0].rule, "jsonrpc.too_large");
    assert!(answered.contains("-32600"));
    assert_eq!(
        passed,
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
    );
}

/// Malformed (`method` is not a string) with an id of `id_len` bytes.
fn malformed_with_id(id_len: usize) -> String {
    let id = "i".repeat(id_len);
    format!("{{\"jsonrpc\":\"2.0\",\"id\":\"{id}\",\"method\":5}}\n")
}

#[tokio::test]
async fn a_client_that_stops_reading_stops_the_input_not_memory() {
    // Malformed lines with large ids, answered to a client that never
    // reads its end: the input must stop, not queue every answer.
    let lines = 300;
    let input = malformed_with_id(16 * 1024).repeat(lines).into_bytes();
    let (_wire, ends) = Wire::new(crate::obs::telemetry::Telemetry::disabled());
    let (_client, server_out) = tokio::io::duplex(64);
    let writer = tokio::spawn(pump_output(ends.from_server, ends.answers_rx, server_out));
    let faults = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let reader = tokio::spawn(pump_input(
        std::io::Cursor::new(input),
        ends.to_server,
        ends.answers_tx,
        Arc::default(),
        {
            let faults = Arc::clone(&faults);
            move |_: &Fault| {
                faults.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        },
    ));
    // Wait until the input pump makes no more progress.
    let mut seen = usize::MAX;
    while seen != faults.load(std::sync::atomic::Ordering::SeqCst) {
        seen = faults.load(std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        !reader.is_finished(),
        "all {lines} lines were read although no answer could be written"
    );
    // The queue, the line being written, the answer waiting to be queued.
    assert!(seen <= ANSWER_QUEUE + 2, "{seen} answers pending");
    reader.abort();
    writer.abort();
}

#[tokio::test]
async fn an_overlong_id_is_answered_with_a_null_id() {
    let (_, answered, faults) = run(malformed_with_id(1024 * 1024 - 100).as_bytes()).await;
    assert!(answered.len() < 1024, "{} bytes answered", answered.len());
    let reply: Value = serde_json::from_str(answered.trim()).unwrap();
    assert_eq!(reply["id"], Value::Null);
    assert_eq!(reply["error"]["code"], -32600);
    // The audit record still gets the id.
    assert_eq!(
        faults[0].request_id.as_ref().map(String::len),
        Some(1024 * 1024 - 100)
    );
    // An id at the bound is still echoed.
    let (_, answered, _) = run(malformed_with_id(MAX_ECHOED_ID_BYTES).as_bytes()).await;
    let reply: Value = serde_json::from_str(answered.trim()).unwrap();
    assert_eq!(reply["id"], "i".repeat(MAX_ECHOED_ID_BYTES));
}
