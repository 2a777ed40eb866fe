//! Metrics in CloudWatch embedded metric format (EMF): one JSON line on stdout (in Lambda;
//! stderr elsewhere) per data point,
//! which CloudWatch Logs turns into metrics (namespace `METRICS_NAMESPACE`, default `CloudApi`).
//! Spec: <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>.
//!
//! | metric | dimensions | unit | when |
//! |---|---|---|---|
//! | `OrderTransitions` | `From`, `To` | Count | every order state change |
//! | `CreditsIssued` | — | Count | an order becomes a credit |
//! | `OrdersInFlightOverdue` | — | Count | each reconciler pass: in-flight orders older than 10 minutes |
//! | `OrdersReconciled` | — | Count | each reconciler pass: orders it drove |
//! | `PaymentsReversed` | — | Count | a reconciler pass: payments whose transfer was gone before it was final |

use serde_json::{Map, Value, json};

fn namespace() -> String {
    std::env::var("METRICS_NAMESPACE")
        .ok()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| "CloudApi".into())
}

/// Emits one EMF data point: `name` = `value` (`unit`: `Count`, `Seconds`…) with `dimensions`
/// (name, value) pairs.
pub fn emit(name: &str, value: f64, unit: &str, dimensions: &[(&str, &str)]) {
    let mut line = Map::new();
    line.insert(
        "_aws".into(),
        json!({
            "Timestamp": crate::time::now().unix_timestamp() * 1000,
            "CloudWatchMetrics": [{
                "Namespace": namespace(),
                "Dimensions": [dimensions.iter().map(|(k, _)| *k).collect::<Vec<_>>()],
                "Metrics": [{"Name": name, "Unit": unit}],
            }],
        }),
    );
    for (k, v) in dimensions {
        line.insert((*k).to_owned(), Value::from(*v));
    }
    line.insert(name.to_owned(), Value::from(value));
    // In Lambda the log stream is stdout; elsewhere (svcctl, tests) stdout is the tool's own.
    if std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some() {
        println!("{}", Value::Object(line));
    } else {
        eprintln!("{}", Value::Object(line));
    }
}

/// An order moved from `from` to `to`.
pub fn order_transition(from: &str, to: &str) {
    emit(
        "OrderTransitions",
        1.0,
        "Count",
        &[("From", from), ("To", to)],
    );
    if to == "credited" {
        emit("CreditsIssued", 1.0, "Count", &[]);
    }
}
