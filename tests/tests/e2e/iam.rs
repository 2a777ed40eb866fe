//! IAM as AWS applies it, on the real DynamoDB API (moto applies none): every DynamoDB call a
//! function's handler makes in a test is checked against that function's statements in
//! `template.yaml` — the action, the resource (the table or an index) and the condition on
//! `dynamodb:LeadingKeys` (the partition key of each item, or of the index a query reads) — and a
//! call the template would refuse fails the test, naming the function, the action and the key.
//!
//! What SAM adds to a role on its own (a managed policy for an event source) is not in the
//! template's text: `template::the_translated_roles_hold_nothing_the_template_does_not_say`
//! reads the roles from SAM's own translation of it.
//!
//! So every end-to-end test checks the template's least privilege: a function that starts
//! touching records of a new kind fails until its policy names them, and a policy that names
//! too little fails where AWS would answer `AccessDeniedException`.
//!
//! The rules followed (AWS, "Using IAM policy conditions for fine-grained access control"):
//! `TransactWriteItems` is authorized per item as `PutItem`, `UpdateItem`, `DeleteItem` or
//! `ConditionCheckItem`; `TransactGetItems` as `GetItem` per item; `BatchGetItem` per key; a
//! query of an index needs the index's ARN and its leading key is the index's partition value;
//! `ForAllValues:StringLike` patterns end in `*` or match whole.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{LazyLock, Mutex};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use serde_json::Value;
use serde_yaml_ng::Value as Yaml;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

tokio::task_local! {
    /// The function (its binary's name) whose handler runs in this task.
    static FUNCTION: String;
}

/// The invocations in flight, by function: `rmcp` runs an MCP tool in a task of its own, which
/// the task-local does not reach; its calls are the `mcp` function's when that function's are
/// the only invocations in flight (as in Lambda, where a process serves one function).
static IN_FLIGHT: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Marks one invocation in flight until dropped (a handler killed mid-way included).
struct InFlight(String);

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut in_flight = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = in_flight.iter().position(|f| *f == self.0) {
            in_flight.swap_remove(i);
        }
    }
}

/// Runs `future` as function `function` (a binary's name, e.g. `servers`): its DynamoDB calls
/// are checked against that function's policy.
pub async fn as_function<F: Future>(function: &str, future: F) -> F::Output {
    IN_FLIGHT.lock().unwrap().push(function.to_owned());
    let _in_flight = InFlight(function.to_owned());
    FUNCTION.scope(function.to_owned(), future).await
}

/// The function a call belongs to: its task's, or `mcp` when only `mcp` invocations are in
/// flight (a tool's own task); `None` for the test's own setup and the operator's tool.
fn current() -> Option<String> {
    FUNCTION.try_with(Clone::clone).ok().or_else(|| {
        let in_flight = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
        (!in_flight.is_empty() && in_flight.iter().all(|f| f == "mcp")).then(|| "mcp".to_owned())
    })
}

/// One DynamoDB access as IAM authorizes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The IAM action without its `dynamodb:` prefix (`GetItem`, `ConditionCheckItem`, …).
    pub action: String,
    /// `None` for the table, `Some(index)` for a query of an index.
    pub index: Option<String>,
    /// The leading key: the item's `pk`, or the index partition value a query reads.
    pub leading_key: String,
    /// The attributes a query reads (its `ProjectionExpression`, names resolved); `None` for
    /// whole items, and for every other action.
    pub attributes: Option<Vec<String>>,
}

/// One `Allow` statement of a function's policy, its DynamoDB part.
#[derive(Debug, Clone)]
pub struct Statement {
    actions: Vec<String>,
    /// `None` for the table ARN, `Some(index)` for `${Table.Arn}/index/<index>`.
    resources: Vec<Option<String>>,
    /// The `dynamodb:LeadingKeys` patterns; `None` when the statement has no such condition.
    leading_keys: Option<Vec<String>>,
    /// The `dynamodb:Attributes` a query may read (`ForAllValues:StringEquals`, with
    /// `dynamodb:Select` `SPECIFIC_ATTRIBUTES`); `None` when the statement does not limit them.
    attributes: Option<Vec<String>>,
}

impl Statement {
    fn allows(&self, access: &Access) -> bool {
        self.actions.contains(&access.action)
            && self.resources.contains(&access.index)
            && self.leading_keys.as_ref().is_none_or(|patterns| {
                patterns.iter().any(|p| match p.strip_suffix('*') {
                    Some(prefix) => access.leading_key.starts_with(prefix),
                    None => access.leading_key == *p,
                })
            })
            && self.attributes.as_ref().is_none_or(|allowed| {
                access
                    .attributes
                    .as_ref()
                    .is_some_and(|read| read.iter().all(|a| allowed.contains(a)))
            })
    }
}

/// Each function's DynamoDB statements, by binary name, as `template.yaml` grants them.
pub fn policies(template: &Yaml) -> HashMap<String, Vec<Statement>> {
    let mut out = HashMap::new();
    let resources = template["Resources"].as_mapping().expect("Resources");
    for resource in resources.values() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let binary = resource["Metadata"]["BuildProperties"]["Binary"]
            .as_str()
            .expect("every function names its binary")
            .to_owned();
        let mut statements = Vec::new();
        for policy in resource["Properties"]["Policies"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            for statement in policy["Statement"].as_sequence().into_iter().flatten() {
                if let Some(s) = statement_of(statement) {
                    statements.push(s);
                }
            }
        }
        out.insert(binary, statements);
    }
    out
}

fn strings(v: &Yaml) -> Vec<&Yaml> {
    match v.as_sequence() {
        Some(items) => items.iter().collect(),
        None => vec![v],
    }
}

/// The table (`None`) or index (`Some`) a resource entry names: `!GetAtt Table.Arn` or
/// `!Sub "${Table.Arn}/index/<name>"`.
fn resource_of(v: &Yaml) -> Option<String> {
    let Yaml::Tagged(tagged) = v else {
        panic!("a DynamoDB resource is !GetAtt or !Sub: {v:?}")
    };
    let text = tagged.value.as_str().expect("a string resource");
    match tagged.tag.to_string().as_str() {
        "!GetAtt" => {
            assert_eq!(text, "Table.Arn", "only the table is granted");
            None
        }
        "!Sub" => Some(
            text.strip_prefix("${Table.Arn}/index/")
                .unwrap_or_else(|| panic!("an index of the table: {text}"))
                .to_owned(),
        ),
        other => panic!("unexpected tag {other}"),
    }
}

/// What reading a table's stream takes (the mapping reads it for the function).
pub const STREAM_ACTIONS: &[&str] = &[
    "DescribeStream",
    "GetRecords",
    "GetShardIterator",
    "ListStreams",
];

fn statement_of(statement: &Yaml) -> Option<Statement> {
    assert_eq!(statement["Effect"].as_str(), Some("Allow"));
    let actions: Vec<String> = strings(&statement["Action"])
        .into_iter()
        .filter_map(|a| a.as_str()?.strip_prefix("dynamodb:").map(str::to_owned))
        .collect();
    // The stream's actions are the event source mapping's, not the handler's (`STREAM_ACTIONS`).
    if actions.is_empty() || actions.iter().all(|a| STREAM_ACTIONS.contains(&a.as_str())) {
        return None;
    }
    let resources = strings(&statement["Resource"])
        .into_iter()
        .map(resource_of)
        .collect();
    let condition = &statement["Condition"];
    let leading_keys = (!condition.is_null()).then(|| {
        strings(&condition["ForAllValues:StringLike"]["dynamodb:LeadingKeys"])
            .into_iter()
            .map(|p| p.as_str().expect("a pattern").to_owned())
            .collect()
    });
    let attributes = (!condition["ForAllValues:StringEquals"]["dynamodb:Attributes"].is_null())
        .then(|| {
            assert_eq!(
                condition["StringEqualsIfExists"]["dynamodb:Select"].as_str(),
                Some("SPECIFIC_ATTRIBUTES"),
                "dynamodb:Attributes without dynamodb:Select SPECIFIC_ATTRIBUTES limits nothing"
            );
            strings(&condition["ForAllValues:StringEquals"]["dynamodb:Attributes"])
                .into_iter()
                .map(|a| a.as_str().expect("an attribute").to_owned())
                .collect()
        });
    Some(Statement {
        actions,
        resources,
        leading_keys,
        attributes,
    })
}

/// `template.yaml`'s policies, read once.
static TEMPLATE: LazyLock<HashMap<String, Vec<Statement>>> = LazyLock::new(|| {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap();
    policies(&serde_yaml_ng::from_str(&text).expect("template.yaml parses"))
});

fn pk(item: &Value) -> String {
    item["pk"]["S"]
        .as_str()
        .unwrap_or_else(|| panic!("an item key with pk: {item}"))
        .to_owned()
}

fn table(action: &str, key: &Value) -> Access {
    Access {
        action: action.into(),
        index: None,
        leading_key: pk(key),
        attributes: None,
    }
}

/// What IAM authorizes for one call: `operation` (the `X-Amz-Target`'s last part) with JSON
/// `body`.
pub fn accesses(operation: &str, body: &Value) -> Vec<Access> {
    match operation {
        "GetItem" | "UpdateItem" | "DeleteItem" => vec![table(operation, &body["Key"])],
        "PutItem" => vec![table(operation, &body["Item"])],
        "BatchGetItem" => body["RequestItems"]
            .as_object()
            .into_iter()
            .flat_map(|tables| tables.values())
            .flat_map(|t| t["Keys"].as_array().cloned().unwrap_or_default())
            .map(|key| table("BatchGetItem", &key))
            .collect(),
        "BatchWriteItem" => body["RequestItems"]
            .as_object()
            .into_iter()
            .flat_map(|tables| tables.values())
            .flat_map(|t| t.as_array().cloned().unwrap_or_default())
            .map(|w| match (&w["PutRequest"], &w["DeleteRequest"]) {
                (Value::Null, delete) => table("DeleteItem", &delete["Key"]),
                (put, _) => table("PutItem", &put["Item"]),
            })
            .collect(),
        "TransactWriteItems" | "TransactGetItems" => body["TransactItems"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|item| {
                let (kind, fields) = item
                    .as_object()
                    .and_then(|o| o.iter().next())
                    .expect("one operation per transact item");
                match kind.as_str() {
                    "Put" => table("PutItem", &fields["Item"]),
                    "Update" => table("UpdateItem", &fields["Key"]),
                    "Delete" => table("DeleteItem", &fields["Key"]),
                    "ConditionCheck" => table("ConditionCheckItem", &fields["Key"]),
                    "Get" => table("GetItem", &fields["Key"]),
                    other => panic!("unknown transact item {other}"),
                }
            })
            .collect(),
        "Query" => vec![Access {
            action: "Query".into(),
            index: body["IndexName"].as_str().map(str::to_owned),
            leading_key: query_partition(body),
            attributes: projection(body),
        }],
        // A scan has no leading key: only a policy without the condition could allow it.
        other => vec![Access {
            action: other.into(),
            index: None,
            leading_key: String::new(),
            attributes: None,
        }],
    }
}

/// The attributes a call's `ProjectionExpression` names (`#name` placeholders resolved);
/// `None` without one (whole items).
fn projection(body: &Value) -> Option<Vec<String>> {
    let expression = body["ProjectionExpression"].as_str()?;
    Some(
        expression
            .split(',')
            .map(str::trim)
            .map(
                |name| match body["ExpressionAttributeNames"][name].as_str() {
                    Some(resolved) => resolved.to_owned(),
                    None => name.to_owned(),
                },
            )
            .collect(),
    )
}

/// The partition value a query reads: the value bound by `<name> = :value`, the first
/// comparison of its key condition.
fn query_partition(body: &Value) -> String {
    let condition = body["KeyConditionExpression"]
        .as_str()
        .expect("a key condition");
    let (_, rest) = condition
        .split_once('=')
        .unwrap_or_else(|| panic!("an equality on the partition key: {condition}"));
    let placeholder = rest.split_whitespace().next().unwrap_or_default();
    body["ExpressionAttributeValues"][placeholder]["S"]
        .as_str()
        .unwrap_or_else(|| panic!("a string partition value for {placeholder}"))
        .to_owned()
}

/// Whether `function`'s policy in `policies` allows every access of the call, or the first
/// it refuses.
pub fn refused<'a>(
    policies: &HashMap<String, Vec<Statement>>,
    function: &str,
    accesses: &'a [Access],
) -> Option<&'a Access> {
    let statements = policies
        .get(function)
        .unwrap_or_else(|| panic!("no function {function} in template.yaml"));
    accesses
        .iter()
        .find(|a| !statements.iter().any(|s| s.allows(a)))
}

/// The interceptor: checks each call made inside [`as_function`] against `template.yaml`.
#[derive(Debug, Clone)]
pub struct Iam;

impl Intercept for Iam {
    fn name(&self) -> &'static str {
        "Iam"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(function) = current() else {
            return Ok(());
        };
        let request = context.request();
        let target = request.headers().get("x-amz-target").unwrap_or_default();
        let operation = target.rsplit('.').next().unwrap_or(target);
        let body: Value = request
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or_default();
        let accesses = accesses(operation, &body);
        if let Some(access) = refused(&TEMPLATE, &function, &accesses) {
            // As AWS would refuse it, and loud: a test meeting it fails here, not on a 500.
            panic!(
                "AccessDeniedException: template.yaml does not allow function `{function}` \
                 dynamodb:{} on {} with leading key `{}`",
                access.action,
                access.index.as_deref().unwrap_or("the table"),
                access.leading_key
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn get(pk: &str) -> Vec<Access> {
        accesses(
            "GetItem",
            &json!({"Key": {"pk": {"S": pk}, "sk": {"S": "X"}}}),
        )
    }

    fn query(index: &str, partition: &str) -> Vec<Access> {
        accesses(
            "Query",
            &json!({
                "IndexName": index,
                "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :sk)",
                "ExpressionAttributeValues": {":pk": {"S": partition}, ":sk": {"S": "X"}},
            }),
        )
    }

    #[test]
    fn every_table_statement_names_the_partitions_it_may_touch() {
        for (function, statements) in TEMPLATE.iter() {
            for statement in statements {
                let patterns = statement.leading_keys.as_ref().unwrap_or_else(|| {
                    panic!("{function}: a DynamoDB statement without dynamodb:LeadingKeys")
                });
                assert!(
                    patterns.iter().all(|p| p.len() > 1 && p != "*"),
                    "{function}: {patterns:?} bounds nothing"
                );
            }
        }
        // The functions that never touch the table have no DynamoDB statement at all.
        for function in ["status", "docs", "console"] {
            assert!(TEMPLATE[function].is_empty(), "{function}");
        }
    }

    #[test]
    fn the_checker_refuses_what_aws_would() {
        let t = &*TEMPLATE;
        // An item of a kind the function's policy does not name.
        assert!(refused(t, "servers", &get("NONCE#abc")).is_some());
        assert!(refused(t, "auth", &get("PAYMENT#eip155:8453/0x/0x/0x")).is_some());
        assert!(refused(t, "auth", &get("SESSION#00")).is_none());
        // One item of a transaction outside the policy refuses the whole call.
        let transaction = json!({"TransactItems": [
            {"Put": {"Item": {"pk": {"S": "SANDBOX#sbx_1"}}}},
            {"Update": {"Key": {"pk": {"S": "NONCE#n"}}}},
        ]});
        let both = accesses("TransactWriteItems", &transaction);
        assert_eq!(both[0].action, "PutItem");
        assert_eq!(
            refused(t, "servers", &both).map(|a| a.leading_key.as_str()),
            Some("NONCE#n")
        );
        // An action the statement does not list, on a partition it does.
        let delete = accesses("DeleteItem", &json!({"Key": {"pk": {"S": "PAYMENT#x"}}}));
        assert!(refused(t, "payments", &delete).is_some());
        // An index: its own ARN and its own partition value.
        assert!(refused(t, "keys", &query("gsi1", "OWNER#0xabc")).is_none());
        assert!(refused(t, "keys", &query("gsi2", "PAYSTATE#claimed")).is_some());
        assert!(refused(t, "reconciler", &query("gsi2", "PAYSTATE#claimed")).is_none());
        assert!(refused(t, "reconciler", &query("gsi1", "OWNER#0xabc")).is_some());
        // A whole pattern matches whole: `LEASE` is not `LEASES`.
        assert!(refused(t, "reconciler", &query("gsi2", "LEASE")).is_none());
        assert!(refused(t, "reconciler", &query("gsi2", "LEASES")).is_some());
        // A scan has no leading key and no function may scan.
        let scan = accesses("Scan", &json!({}));
        for function in TEMPLATE.keys() {
            assert!(refused(t, function, &scan).is_some(), "{function}");
        }
    }

    #[tokio::test]
    async fn a_function_touching_a_record_its_policy_does_not_name_fails_its_test() {
        let env = crate::harness::TestEnv::new().await;
        let store = env.store.clone();
        let id = domain::x402::PaymentKey::of(
            domain::x402::Network::Base,
            "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913",
            "0x1111111111111111111111111111111111111111",
            &format!("0x{}", "2".repeat(64)),
        );
        // The servers function may read a payment...
        let allowed = as_function("servers", store.order(&id)).await;
        assert!(allowed.is_ok(), "{allowed:?}");
        // ...the auth function may not: the call fails as AWS would refuse it.
        let refused = tokio::spawn(as_function("auth", async move {
            store.order(&id).await.map(|_| ())
        }))
        .await;
        let panic = refused.expect_err("the call is refused").into_panic();
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        assert!(
            message.contains(
                "function `auth` dynamodb:GetItem on the table with leading key `PAYMENT#"
            ),
            "{message}"
        );
    }
}
