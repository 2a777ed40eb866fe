//! `template.yaml` against the code (issue point 12): the table is the one `store::schema`
//! creates locally, the routes are the router table `make dev` serves, one parameter name per
//! path position, and every function is a workspace binary.

use std::collections::{BTreeMap, BTreeSet};

use domain::store::schema;
use serde_yaml_ng::Value;

use crate::harness::router_rows;

fn template() -> Value {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../template.yaml")).unwrap();
    serde_yaml_ng::from_str(&text).expect("template.yaml parses")
}

fn s(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v:?}"))
        .to_owned()
}

fn key_schema(v: &Value) -> Vec<(String, String)> {
    v.as_sequence()
        .unwrap()
        .iter()
        .map(|k| (s(&k["AttributeName"]), s(&k["KeyType"])))
        .collect()
}

#[test]
fn the_table_matches_the_schema_the_local_stack_creates() {
    let t = template();
    let props = &t["Resources"]["Table"]["Properties"];
    let mut attributes: Vec<(String, String)> = props["AttributeDefinitions"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| (s(&a["AttributeName"]), s(&a["AttributeType"])))
        .collect();
    attributes.sort();
    let gsis = props["GlobalSecondaryIndexes"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|g| {
            (
                s(&g["IndexName"]),
                key_schema(&g["KeySchema"]),
                s(&g["Projection"]["ProjectionType"]),
            )
        })
        .collect();
    assert_eq!(
        props["TimeToLiveSpecification"]["Enabled"],
        Value::Bool(true)
    );
    let declared = schema::TableSpec {
        attributes,
        key_schema: key_schema(&props["KeySchema"]),
        gsis,
        ttl_attribute: s(&props["TimeToLiveSpecification"]["AttributeName"]),
        billing_mode: s(&props["BillingMode"]),
        stream_view: s(&props["StreamSpecification"]["StreamViewType"]),
    };
    assert_eq!(declared, schema::spec());
    // The passes' indexes hold keys only (their items are read whole, strongly consistent);
    // the owner's listings' index holds the records it lists.
    let projection = |name: &str| {
        let spec = schema::spec();
        spec.gsis.iter().find(|g| g.0 == name).map(|g| g.2.clone())
    };
    assert_eq!(projection(schema::GSI1).as_deref(), Some("ALL"));
    assert_eq!(projection(schema::GSI2).as_deref(), Some("KEYS_ONLY"));
    assert_eq!(projection(schema::GSI3).as_deref(), Some("KEYS_ONLY"));
}

/// (method, path, function) of every HttpApi event.
pub(crate) fn template_routes() -> BTreeSet<(String, String, String)> {
    let t = template();
    let mut routes = BTreeSet::new();
    for (_, resource) in t["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let binary = s(&resource["Metadata"]["BuildProperties"]["Binary"]);
        // The stream's and the queue's functions are invoked by mappings of their own.
        if ["events", "deliveries"].contains(&binary.as_str()) {
            assert!(resource["Properties"]["Events"].is_null(), "{binary}");
            continue;
        }
        for (_, event) in resource["Properties"]["Events"].as_mapping().unwrap() {
            if binary == "reconciler" {
                assert_eq!(event["Type"].as_str(), Some("Schedule"));
                continue;
            }
            assert_eq!(event["Type"].as_str(), Some("HttpApi"));
            assert!(
                matches!(event["Properties"]["ApiId"], Value::Tagged(_)),
                "{binary}: routes belong to the Api with access logs"
            );
            routes.insert((
                s(&event["Properties"]["Method"]),
                s(&event["Properties"]["Path"]),
                binary.clone(),
            ));
        }
    }
    routes
}

/// `template.yaml`'s HTTP events, `Cargo.toml`'s watch router and `server.json` are what
/// `svcctl generate` writes from the route table now (`make generate`).
#[test]
fn the_files_made_from_the_route_table_are_current() {
    use domain::api::generated;
    for (file, write) in [
        ("template.yaml", generated::template as fn(&str) -> _),
        ("Cargo.toml", generated::cargo_toml),
        ("server.json", generated::server_json),
    ] {
        let path = format!("{}/../{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        let written = write(&text).unwrap();
        assert!(
            written == text,
            "{file} is not what `svcctl generate` writes from the route table and the grants: \
             run `make generate`"
        );
    }
}

/// `docs/storage.md`'s items table names every partition of `store::partitions` (a prefix in
/// a key column, or an index's fixed value as `gsi2pk = LEASE`), and every partition its key
/// columns name is one of them.
#[test]
fn every_partition_is_in_the_storage_doc_and_only_those() {
    use domain::store::partitions::Partition;
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/storage.md"))
        .unwrap();
    let items = &doc[doc.find("## Items").unwrap()..doc.find("## Access patterns").unwrap()];
    for partition in Partition::ALL {
        let prefix = partition.prefix();
        let named = if partition.is_fixed() {
            items.contains(&format!("pk = {prefix}`"))
        } else {
            items.contains(&format!("`{prefix}")) || items.contains(&format!("pk = {prefix}"))
        };
        assert!(
            named,
            "{partition:?} ({prefix}) is not in docs/storage.md's items"
        );
    }
    let known: BTreeSet<&str> = Partition::ALL.iter().map(|p| p.prefix()).collect();
    for row in items
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| item"))
    {
        let cells: Vec<&str> = row.split(" | ").collect();
        // The `pk` and `gsi1pk` columns: each key's prefix, up to its first `#`.
        for cell in [cells[1], cells[3]] {
            for key in cell.split('`').skip(1).step_by(2) {
                let Some(end) = key.find('#') else { continue };
                let prefix = &key[..=end];
                assert!(
                    known.contains(prefix),
                    "{prefix} of `{key}` is not a partition"
                );
            }
        }
    }
}

#[test]
fn template_routes_and_the_dev_router_table_agree() {
    let template = template_routes();
    let router = router_rows();
    // Every template route is served by the same function locally…
    for (method, path, function) in &template {
        let served = router
            .iter()
            .any(|(m, p, f)| (m == method || m == "*") && p == path && f == function);
        assert!(
            served,
            "{method} {path} → {function} is not in the router table"
        );
    }
    // …and every router entry is deployed.
    for (method, path, function) in &router {
        let deployed = template
            .iter()
            .any(|(m, p, f)| (method == "*" || m == method) && p == path && f == function);
        assert!(
            deployed,
            "router {method} {path} → {function} is not in template.yaml"
        );
    }
}

#[test]
fn one_parameter_name_per_path_position() {
    let mut names: BTreeMap<(String, usize), String> = BTreeMap::new();
    for (_, path, _) in template_routes() {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        for (i, segment) in segments.iter().enumerate() {
            if segment.starts_with('{') {
                let prefix = segments[..i].join("/");
                let previous = names
                    .entry((prefix.clone(), i))
                    .or_insert_with(|| segment.to_string());
                assert_eq!(previous, segment, "two names at /{prefix}/…");
            }
        }
    }
}

#[test]
fn every_function_is_an_arm64_workspace_binary_with_its_own_policies() {
    let t = template();
    let globals = &t["Globals"]["Function"];
    assert_eq!(globals["Architectures"][0].as_str(), Some("arm64"));
    assert_eq!(globals["Runtime"].as_str(), Some("provided.al2023"));
    assert_eq!(globals["LoggingConfig"]["LogFormat"].as_str(), Some("JSON"));
    // The provider's token is no global: only the functions that call the provider name and
    // may read it (status names it, to say whether one is configured, and may not read it).
    assert!(globals["Environment"]["Variables"]["UPSTREAM_TOKEN_PARAM"].is_null());
    let provider_callers: BTreeSet<&str> = [
        "discovery",
        "keys",
        "servers",
        "actions",
        "mcp",
        "reconciler",
    ]
    .into();
    let members: BTreeSet<String> = [
        "status",
        "docs",
        "console",
        "auth",
        "keys",
        "discovery",
        "servers",
        "actions",
        "sandboxes",
        "payments",
        "notifications",
        "events",
        "deliveries",
        "mcp",
        "reconciler",
    ]
    .map(String::from)
    .into();
    let mut binaries = BTreeSet::new();
    for (_, resource) in t["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        assert_eq!(
            resource["Metadata"]["BuildMethod"].as_str(),
            Some("rust-cargolambda")
        );
        let binary = s(&resource["Metadata"]["BuildProperties"]["Binary"]);
        let manifest = format!(
            "{}/../functions/{binary}/Cargo.toml",
            env!("CARGO_MANIFEST_DIR")
        );
        assert!(
            std::path::Path::new(&manifest).exists(),
            "{binary} is a workspace function"
        );
        let policies = &resource["Properties"]["Policies"];
        let text = serde_yaml_ng::to_string(policies).unwrap();
        assert!(
            !text.contains("dynamodb:*") && !text.contains("DynamoDBCrudPolicy"),
            "{binary}: least privilege"
        );
        let calls_provider = provider_callers.contains(binary.as_str());
        assert_eq!(
            text.contains("UpstreamTokenParameterName"),
            calls_provider,
            "{binary}: reads the token only if it calls the provider"
        );
        assert_eq!(
            matches!(
                resource["Properties"]["Environment"]["Variables"]["UPSTREAM_TOKEN_PARAM"],
                Value::Tagged(_)
            ),
            calls_provider || binary == "status",
            "{binary}: names the token only if it calls the provider (or reports it)"
        );
        binaries.insert(binary);
    }
    assert_eq!(binaries, members);
}

#[test]
fn the_reconciler_runs_every_minute_and_the_paid_path_is_watched() {
    let t = template();
    let resources = &t["Resources"];
    let reconciler = &resources["ReconcilerFunction"]["Properties"];
    assert_eq!(
        reconciler["Events"]["EveryMinute"]["Properties"]["Schedule"].as_str(),
        Some("rate(1 minute)")
    );
    let alarms = [
        ("OrdersOverdueAlarm", "OrdersInFlightOverdue"),
        ("CreditsIssuedAlarm", "CreditsIssued"),
        ("PaymentsReversedAlarm", "PaymentsReversed"),
        ("TransfersNotFinalAlarm", "TransfersNotFinal"),
        ("LeaseStepFailedTwiceAlarm", "LeaseStepFailedTwice"),
        ("ReconcilerErrorsAlarm", "Errors"),
        ("ServersErrorsAlarm", "Errors"),
        ("Api5xxAlarm", "5xx"),
    ];
    for (name, metric) in alarms {
        assert_eq!(
            resources[name]["Type"].as_str(),
            Some("AWS::CloudWatch::Alarm"),
            "{name}"
        );
        assert_eq!(
            resources[name]["Properties"]["MetricName"].as_str(),
            Some(metric),
            "{name}"
        );
    }
    assert!(matches!(
        resources["Api"]["Properties"]["AccessLogSettings"]["DestinationArn"],
        Value::Tagged(_)
    ));
}

/// The paid path's worst case within the servers function's timeout: verify + settle + the
/// pending retry (facilitator timeouts) + the provider's create, plus the margin kept for the
/// ledger writes and the answer.
#[test]
fn the_paid_path_budget_adds_up() {
    let t = template();
    let servers = &t["Resources"]["ServersFunction"]["Properties"];
    let seconds = |name: &str| -> f64 {
        s(&servers["Environment"]["Variables"][name])
            .parse()
            .unwrap()
    };
    let timeout = servers["Timeout"].as_f64().unwrap();
    // Verify, settle, the pending retry; the chain's receipt of the transfer; the create.
    let worst = 3.0 * seconds("FACILITATOR_TIMEOUT_SECONDS")
        + seconds("RPC_TIMEOUT_SECONDS")
        + seconds("UPSTREAM_TIMEOUT_SECONDS")
        + domain::deadline::MARGIN.as_secs_f64();
    assert!(worst <= timeout, "{worst} s > {timeout} s");
    assert!(timeout < 30.0, "API Gateway waits 30 s");
    assert!(
        s(&servers["Environment"]["Variables"]["X402_MAX_TIMEOUT_SECONDS"])
            .parse::<f64>()
            .unwrap()
            > timeout
    );
}

#[test]
fn the_functions_that_read_key_usage_may_batch_read() {
    // Key usage (spend counters, the servers a key holds, their sandboxes) is read with
    // BatchGetItem by the key listing and by every paid or new-server request.
    let t = template();
    let mut checked = BTreeSet::new();
    for (_, resource) in t["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let binary = s(&resource["Metadata"]["BuildProperties"]["Binary"]);
        if ["keys", "servers", "mcp"].contains(&binary.as_str()) {
            let policies = serde_yaml_ng::to_string(&resource["Properties"]["Policies"]).unwrap();
            assert!(policies.contains("dynamodb:BatchGetItem"), "{binary}");
            checked.insert(binary);
        }
    }
    assert_eq!(checked.len(), 3);
}

/// `!Ref X` as `X`.
fn reference(v: &Value) -> Option<String> {
    match v {
        Value::Tagged(tagged) if tagged.tag == "!Ref" => tagged.value.as_str().map(str::to_owned),
        _ => None,
    }
}

#[test]
fn every_function_logs_to_a_group_that_forgets() {
    let t = template();
    let resources = &t["Resources"];
    let parameter = &t["Parameters"]["LogRetentionDays"];
    assert_eq!(parameter["Default"].as_u64(), Some(30));
    let mut groups = BTreeSet::new();
    for (name, resource) in resources.as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let name = s(name);
        let group = reference(&resource["Properties"]["LoggingConfig"]["LogGroup"])
            .unwrap_or_else(|| panic!("{name}: no log group of its own"));
        let log_group = &resources[group.as_str()];
        assert_eq!(
            log_group["Type"].as_str(),
            Some("AWS::Logs::LogGroup"),
            "{name}"
        );
        assert_eq!(
            reference(&log_group["Properties"]["RetentionInDays"]).as_deref(),
            Some("LogRetentionDays"),
            "{name}: its logs expire"
        );
        assert!(groups.insert(group), "{name}: a group of its own");
    }
    assert_eq!(groups.len(), 15);
}

/// The table's stream feeds the `events` function new event items only, with partial batch
/// responses, bisection, a dead-letter queue and an alarm on it (issue 20, point 4), through a
/// mapping of its own: no managed policy, the stream alone granted (issue 34, point 5).
#[test]
fn the_stream_feeds_the_events_function_event_items_only() {
    let t = template();
    let resources = &t["Resources"];
    let stream = &resources["Table"]["Properties"]["StreamSpecification"];
    assert_eq!(s(&stream["StreamViewType"]), "NEW_IMAGE");
    let events = &resources["EventsFunction"]["Properties"];
    let mapping = &resources["EventsStreamMapping"]["Properties"];
    assert_eq!(
        resources["EventsStreamMapping"]["Type"].as_str(),
        Some("AWS::Lambda::EventSourceMapping")
    );
    assert_eq!(
        reference(&mapping["FunctionName"]).as_deref(),
        Some("EventsFunction")
    );
    assert_eq!(
        serde_yaml_ng::to_string(&mapping["EventSourceArn"])
            .unwrap()
            .trim(),
        "!GetAtt Table.StreamArn"
    );
    assert_eq!(s(&mapping["StartingPosition"]), "TRIM_HORIZON");
    assert_eq!(
        mapping["FunctionResponseTypes"][0].as_str(),
        Some("ReportBatchItemFailures")
    );
    assert_eq!(mapping["BisectBatchOnFunctionError"].as_bool(), Some(true));
    let pattern: serde_json::Value =
        serde_json::from_str(&s(&mapping["FilterCriteria"]["Filters"][0]["Pattern"])).unwrap();
    assert_eq!(pattern["eventName"], serde_json::json!(["INSERT"]));
    assert_eq!(
        pattern["dynamodb"]["Keys"]["pk"]["S"][0]["prefix"],
        domain::store::events::EVENTS_PREFIX
    );
    // What still fails goes to the dead-letter queue, which is alarmed on.
    let destination = &mapping["DestinationConfig"]["OnFailure"];
    assert!(
        serde_yaml_ng::to_string(&destination["Destination"])
            .unwrap()
            .contains("EventsDeadLetterQueue.Arn")
    );
    let alarm = &resources["EventsDeadLetterAlarm"]["Properties"];
    assert_eq!(s(&alarm["Namespace"]), "AWS/SQS");
    assert!(
        serde_yaml_ng::to_string(&alarm["Dimensions"])
            .unwrap()
            .contains("EventsDeadLetterQueue.QueueName")
    );
    // The stream's reads name this stream alone, and the function sends nothing: a batch
    // positions and queues.
    let policies = serde_yaml_ng::to_string(&events["Policies"]).unwrap();
    assert!(!policies.contains("ExecutionRole"), "{policies}");
    assert!(policies.contains("dynamodb:GetRecords"), "{policies}");
    let grants = policy_statements(&events["Policies"]);
    let reads = grants
        .iter()
        .find(|g| g.0.contains(&"dynamodb:GetRecords".to_owned()))
        .unwrap();
    assert_eq!(reads.1, ["!GetAtt Table.StreamArn"]);
    assert!(mapping["BatchSize"].as_u64().unwrap() <= 100);
}

/// Each statement's actions and resources (as YAML text) of a function's `Policies`.
fn policy_statements(policies: &Value) -> Vec<(Vec<String>, Vec<String>)> {
    let mut out = Vec::new();
    for policy in policies.as_sequence().into_iter().flatten() {
        for statement in policy["Statement"].as_sequence().into_iter().flatten() {
            let list = |v: &Value| match v.as_sequence() {
                Some(items) => items.clone(),
                None => vec![v.clone()],
            };
            let text = |v: Value| match (&v, v.as_str()) {
                (Value::Tagged(_), _) | (_, None) => {
                    serde_yaml_ng::to_string(&v).unwrap().trim().to_owned()
                }
                (_, Some(s)) => s.to_owned(),
            };
            out.push((
                list(&statement["Action"]).into_iter().map(text).collect(),
                list(&statement["Resource"]).into_iter().map(text).collect(),
            ));
        }
    }
    out
}

/// Webhook deliveries go through an SQS FIFO queue (issue 34, point 2) that the `deliveries`
/// function consumes with partial batch responses; a visibility timeout of six times the
/// function's, a dead-letter queue after more receipts than the schedule's attempts, and an
/// alarm on it. Every function is told the queue's URL.
#[test]
fn deliveries_go_through_a_fifo_queue_with_a_dead_letter_queue() {
    let t = template();
    let resources = &t["Resources"];
    let queue = &resources["DeliveryQueue"]["Properties"];
    assert_eq!(queue["FifoQueue"].as_bool(), Some(true));
    let function = &resources["DeliveriesFunction"]["Properties"];
    let timeout = function["Timeout"].as_u64().unwrap();
    assert_eq!(
        queue["VisibilityTimeout"].as_u64(),
        Some(6 * timeout),
        "six times the function's timeout"
    );
    assert_eq!(
        queue["VisibilityTimeout"].as_i64(),
        Some(i64::from(domain::store::queue::VISIBILITY_SECONDS))
    );
    let receives = queue["RedrivePolicy"]["maxReceiveCount"].as_u64().unwrap();
    assert_eq!(receives, u64::from(domain::store::queue::MAX_RECEIVES));
    assert!(receives as usize > domain::notifications::deliveries::RETRY_AFTER.len() + 1);
    let dlq = &resources["DeliveryDeadLetterQueue"]["Properties"];
    assert_eq!(dlq["FifoQueue"].as_bool(), Some(true));
    let alarm = serde_yaml_ng::to_string(&resources["DeliveryDeadLetterAlarm"]).unwrap();
    assert!(
        alarm.contains("DeliveryDeadLetterQueue.QueueName"),
        "{alarm}"
    );
    let mapping = &resources["DeliveriesQueueMapping"]["Properties"];
    assert_eq!(
        reference(&mapping["FunctionName"]).as_deref(),
        Some("DeliveriesFunction")
    );
    assert_eq!(
        mapping["FunctionResponseTypes"][0].as_str(),
        Some("ReportBatchItemFailures")
    );
    assert_eq!(
        mapping["BatchSize"].as_i64(),
        Some(i64::from(deliveries::local::MAX_BATCH))
    );
    assert_eq!(
        std::time::Duration::from_secs(timeout),
        deliveries::local::TIMEOUT
    );
    // What the queue gives up on comes back to the function, which ends each delivery
    // (issue 44, point 5): a mapping of the dead-letter queue, and an alarm on what it received.
    let dead = &resources["DeliveriesDeadLetterMapping"]["Properties"];
    assert_eq!(
        reference(&dead["FunctionName"]).as_deref(),
        Some("DeliveriesFunction")
    );
    let source = serde_yaml_ng::to_string(&dead["EventSourceArn"]).unwrap();
    assert!(source.contains("DeliveryDeadLetterQueue.Arn"), "{source}");
    assert!(alarm.contains("NumberOfMessagesReceived"), "{alarm}");
    // No managed policy: the queue's own actions on these two queues alone.
    let grants = policy_statements(&function["Policies"]);
    let sqs: Vec<_> = grants
        .iter()
        .filter(|g| g.0.iter().any(|a| a.starts_with("sqs:")))
        .collect();
    assert_eq!(sqs.len(), 2, "{sqs:?}");
    assert_eq!(sqs[0].1, ["!GetAtt DeliveryQueue.Arn"]);
    assert_eq!(sqs[1].1, ["!GetAtt DeliveryDeadLetterQueue.Arn"]);
    let globals = serde_yaml_ng::to_string(&t["Globals"]["Function"]["Environment"]).unwrap();
    assert!(
        globals.contains("DELIVERY_QUEUE_URL: !Ref DeliveryQueue"),
        "{globals}"
    );
}

#[test]
fn the_paid_path_has_reserved_concurrency_unless_zero_is_asked() {
    let t = template();
    let reserved = &t["Resources"]["ServersFunction"]["Properties"]["ReservedConcurrentExecutions"];
    let text = serde_yaml_ng::to_string(reserved).unwrap();
    assert!(
        text.contains("ReservesPaidPath") && text.contains("PaidPathReservedConcurrency"),
        "{text}"
    );
    let condition = serde_yaml_ng::to_string(&t["Conditions"]["ReservesPaidPath"]).unwrap();
    assert!(
        condition.contains("PaidPathReservedConcurrency"),
        "{condition}"
    );
}

/// The rows of the markdown table under `heading` in `docs/capacity.md`, cells trimmed.
fn capacity_rows(heading: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/capacity.md"))
        .unwrap();
    let section = text
        .split(&format!("## {heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/capacity.md has a `## {heading}` section"));
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The leading number of a cell (`12 reserved` → 12).
fn number(cell: &str) -> Option<u32> {
    cell.split_whitespace().next()?.parse().ok()
}

/// `docs/capacity.md` is the source of the capacity budget (design brief §3): the template's
/// defaults (the servers and discovery functions' reserved concurrency, the delivery pool)
/// and the configuration's (every pool's per-subject cap and global pool) are the table's, no
/// one subject holds more than a third of a pool, and the paid pool fits in the servers
/// function's reservation with room for the unpaid answers beside it.
#[test]
fn the_capacity_table_is_what_the_template_and_the_configuration_default_to() {
    let t = template();
    let functions = capacity_rows("Functions");
    let reserved = |name: &str| {
        let row = functions.iter().find(|r| r[0] == name).unwrap();
        let parameter = row[2].trim_matches('`');
        let default = t["Parameters"][parameter]["Default"].as_u64();
        assert_eq!(
            default,
            number(&row[1]).map(u64::from),
            "{name}: {parameter}"
        );
        (parameter.to_owned(), number(&row[1]).unwrap())
    };
    let (servers_parameter, servers) = reserved("servers");
    let function = &t["Resources"]["ServersFunction"]["Properties"];
    let text = serde_yaml_ng::to_string(&function["ReservedConcurrentExecutions"]).unwrap();
    assert!(text.contains(&servers_parameter), "{text}");
    let (discovery_parameter, _) = reserved("discovery");
    let function = &t["Resources"]["DiscoveryFunction"]["Properties"];
    let text = serde_yaml_ng::to_string(&function["ReservedConcurrentExecutions"]).unwrap();
    assert!(
        text.contains("ReservesDiscovery") && text.contains(&discovery_parameter),
        "{text}"
    );
    let condition = serde_yaml_ng::to_string(&t["Conditions"]["ReservesDiscovery"]).unwrap();
    assert!(condition.contains(&discovery_parameter), "{condition}");
    let (deliveries_parameter, deliveries) = reserved("deliveries");
    let mapping = &t["Resources"]["DeliveriesQueueMapping"]["Properties"];
    let text = serde_yaml_ng::to_string(&mapping["ScalingConfig"]["MaximumConcurrency"]).unwrap();
    assert!(text.contains(&deliveries_parameter), "{text}");

    let config = domain::config::Config::from_lookup(|name| {
        (name == "TABLE_NAME").then(|| "capacity".to_owned())
    })
    .unwrap();
    let caps = config.caps;
    let pools = capacity_rows("Pools of work");
    let configured = [
        ("paid", caps.paid_in_flight, Some(caps.paid_pool)),
        ("sign-in", caps.sign_ins_in_flight, Some(caps.sign_in_pool)),
        ("waits", caps.waits, Some(caps.waits_pool)),
        ("webhook-tests", caps.webhook_tests, None),
        ("probe", 1, None),
        ("slow-deliveries", caps.slow_deliveries, Some(deliveries)),
    ];
    assert_eq!(pools.len(), configured.len());
    for (name, per_subject, everyone) in configured {
        let row = pools.iter().find(|r| r[0] == name).unwrap();
        assert_eq!(number(&row[2]), Some(per_subject), "{name}: per subject");
        if let Some(everyone) = everyone {
            assert_eq!(number(&row[3]), Some(everyone), "{name}: everyone");
            assert!(3 * per_subject <= everyone, "{name}: more than a third");
        }
    }
    assert!(
        caps.paid_pool + 3 <= servers,
        "the paid pool and the unpaid answers fit"
    );
    // Strangers' writes: everyone's budget of registrations, a minute's.
    let writes = capacity_rows("Strangers' writes");
    let registrations = writes.iter().find(|r| r[0] == "registrations").unwrap();
    let budget = config.oauth.registrations.unwrap();
    assert_eq!(
        number(&registrations[4]),
        Some(budget.burst),
        "registrations"
    );
    assert_eq!(budget.window_seconds(), 60, "registrations: a minute's");
    assert!(registrations[5].contains("OAUTH_REGISTRATIONS_BURST"));
}

/// In front of the API (issue 34, point 4): behind `EdgeProtection`, CloudFront with a WAF web
/// ACL (a rate per source address, AWS managed rule groups) before the API's own domain, the
/// execute-api endpoint off, the origin's domain answering CloudFront's client certificate
/// only (mutual TLS), and the origin secret CloudFront adds, which the functions require
/// (`EDGE_ORIGIN_SECRET`). Without it, each paid route and each route anyone may call
/// has a throttle bucket of its own.
#[test]
fn the_edge_is_cloudfront_and_waf_behind_a_parameter() {
    let t = template();
    let resources = &t["Resources"];
    assert_eq!(
        t["Parameters"]["EdgeProtection"]["Default"].as_str(),
        Some("off")
    );
    for name in ["ApiOriginDomain", "ApiOriginMapping", "EdgeDistribution"] {
        assert_eq!(
            resources[name]["Condition"].as_str(),
            Some("EdgeOn"),
            "{name}"
        );
    }
    let acl = &resources["EdgeWebAcl"];
    assert_eq!(acl["Condition"].as_str(), Some("MakesWebAcl"));
    assert_eq!(s(&acl["Properties"]["Scope"]), "CLOUDFRONT");
    let rules = serde_yaml_ng::to_string(&acl["Properties"]["Rules"]).unwrap();
    assert!(rules.contains("AggregateKeyType: IP"), "{rules}");
    // Per caller, per route group: no caller drains a route's throttle for everyone.
    let named = |name: &str| {
        acl["Properties"]["Rules"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|r| r["Name"].as_str() == Some(name))
            .map(|r| serde_yaml_ng::to_string(&r["Statement"]).unwrap())
            .unwrap_or_else(|| panic!("a rule {name}"))
    };
    let paid = named("PaidRatePerSourceAddress");
    assert!(
        paid.contains("/api/cloud/servers/") && paid.contains("POST"),
        "{paid}"
    );
    assert!(named("SignInRatePerSourceAddress").contains("/api/auth/"));
    let oauth = named("OAuthRatePerSourceAddress");
    assert!(
        oauth.contains("SearchString: /oauth/") && oauth.contains("AggregateKeyType: IP"),
        "{oauth}"
    );
    assert!(named("RatePerApiKey").contains("x-api-key"));
    assert!(named("RatePerAuthorization").contains("authorization"));
    // Two origin secrets during a rotation, each at least 32 characters.
    for name in ["EdgeOriginSecret", "EdgeOriginSecretPrevious"] {
        let pattern = t["Parameters"][name]["AllowedPattern"].as_str();
        assert_eq!(pattern, Some("^$|^.{32,}$"), "{name}");
    }
    // The guide the template cites.
    let guide = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/deploy.md");
    assert!(std::path::Path::new(guide).exists(), "docs/deploy.md");
    for group in [
        "AWSManagedRulesCommonRuleSet",
        "AWSManagedRulesKnownBadInputsRuleSet",
        "AWSManagedRulesAmazonIpReputationList",
    ] {
        assert!(rules.contains(group), "{group}");
    }
    let api = serde_yaml_ng::to_string(&resources["Api"]["Properties"]).unwrap();
    assert!(api.contains("DisableExecuteApiEndpoint: !If"), "{api}");
    let distribution =
        serde_yaml_ng::to_string(&resources["EdgeDistribution"]["Properties"]).unwrap();
    assert!(
        distribution.contains("HeaderName: X-Origin-Verify"),
        "{distribution}"
    );
    assert!(distribution.contains("WebACLId"), "{distribution}");
    // The origin answers the edge only (issue 44, point 4): its domain completes a TLS
    // handshake only with the client certificate CloudFront presents, so a request sent around
    // the edge never reaches a route's throttle or a function.
    assert!(
        distribution.contains("ClientCertificateArn: !Ref EdgeClientCertificateArn"),
        "{distribution}"
    );
    let origin = serde_yaml_ng::to_string(&resources["ApiOriginDomain"]["Properties"]).unwrap();
    assert!(
        origin.contains("TruststoreUri: !Ref OriginTruststoreUri"),
        "{origin}"
    );
    let needs = serde_yaml_ng::to_string(&t["Rules"]["EdgeNeedsItsNames"]).unwrap();
    for name in ["EdgeClientCertificateArn", "OriginTruststoreUri"] {
        assert!(needs.contains(name), "the edge needs {name}: {needs}");
    }
    let globals = serde_yaml_ng::to_string(&t["Globals"]["Function"]["Environment"]).unwrap();
    assert!(globals.contains("EDGE_ORIGIN_SECRET"), "{globals}");
    assert!(globals.contains("EDGE_ORIGIN_SECRET_PREVIOUS"), "{globals}");
    // With the edge on, links and offers name the edge's domain, not the request's `Host`.
    assert!(
        globals.contains("PUBLIC_BASE_URL") && globals.contains("https://${EdgeDomainName}"),
        "{globals}"
    );
    // The routes' own throttles: every paid route, every open one, and no other.
    let settings = resources["Api"]["Properties"]["RouteSettings"]
        .as_mapping()
        .unwrap();
    for op in domain::api::OPERATIONS {
        let key = format!("{} {}", op.method, op.path);
        let own = settings.get(Value::from(key.as_str()));
        let params = own.map(|o| serde_yaml_ng::to_string(o).unwrap());
        match (op.paid, op.who.open()) {
            (true, _) => assert!(params.unwrap().contains("PaidRouteThrottleRate"), "{key}"),
            (false, true) => assert!(params.unwrap().contains("OpenRouteThrottleRate"), "{key}"),
            (false, false) => assert!(params.is_none(), "{key}"),
        }
    }
}

/// The template as SAM translates it (`infra/sam-translate.py`, SAM's own translator): what
/// `sam deploy` sends, so what SAM adds on its own is seen (issue 34, point 5). Every function's
/// role carries no managed policy but the logs' (an event source made by SAM would attach
/// `AWSLambdaDynamoDBExecutionRole`, whose `GetRecords` reaches every stream of the account),
/// and reads a stream or a queue only where its statements name them.
#[test]
fn the_translated_roles_hold_nothing_the_template_does_not_say() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let python = format!("{root}/.venv/bin/python");
    assert!(
        std::path::Path::new(&python).exists(),
        "no .venv: run the tests with `make test` (make venv installs SAM's translator)"
    );
    let out = std::process::Command::new(&python)
        .arg(format!("{root}/infra/sam-translate.py"))
        .arg(format!("{root}/template.yaml"))
        .output()
        .expect("run SAM's translator");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let translated: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let resources = translated["Resources"].as_object().unwrap();
    let basic = "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole";
    let mut roles = 0;
    for (name, role) in resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::IAM::Role")
    {
        roles += 1;
        let managed = &role["Properties"]["ManagedPolicyArns"];
        assert_eq!(managed, &serde_json::json!([basic]), "{name}");
        let text = role["Properties"]["Policies"].to_string();
        for action in ["dynamodb:GetRecords", "sqs:ReceiveMessage"] {
            if !text.contains(action) {
                continue;
            }
            assert!(
                ["EventsFunctionRole", "DeliveriesFunctionRole"].contains(&name.as_str()),
                "{name} reads {action}"
            );
            assert!(!text.contains("\"Resource\":\"*\""), "{name}: {text}");
        }
    }
    assert_eq!(roles, 15, "a role per function");
    // The mappings are the template's own, each for its function.
    let mappings: Vec<_> = resources
        .values()
        .filter(|r| r["Type"] == "AWS::Lambda::EventSourceMapping")
        .collect();
    assert_eq!(mappings.len(), 3);
}

/// The functions that face strangers (MCP, servers) delete nothing but the slots they hold: a
/// key, a payment, a sandbox or a server record is never theirs to delete (a bug or a forged
/// request there cannot erase the ledger).
#[test]
fn the_mcp_and_servers_functions_delete_only_their_slots() {
    let t = template();
    for function in ["McpFunction", "ServersFunction"] {
        let policies = &t["Resources"][function]["Properties"]["Policies"];
        for policy in policies.as_sequence().into_iter().flatten() {
            for statement in policy["Statement"].as_sequence().into_iter().flatten() {
                let text = serde_yaml_ng::to_string(&statement["Action"]).unwrap();
                if !text.contains("dynamodb:DeleteItem") {
                    continue;
                }
                let keys =
                    &statement["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"];
                for key in keys.as_sequence().into_iter().flatten().map(s) {
                    let slot = ["WAIT#", "INFLIGHT#"].iter().any(|p| key.starts_with(p));
                    let ssh =
                        ["SSHKEYS#", "SSHRETIRE#", "ALLOT#"].contains(&key.trim_end_matches('*'));
                    assert!(slot || ssh, "{function} may delete {key}");
                }
            }
        }
    }
}

/// The events function reads an owner's endpoints without their signing secrets: its policy
/// names the attributes it may read, exactly those the store's fan-out reads
/// (`store::webhooks::TARGET_ATTRIBUTES`), and `secrets` is not one of them. (Every test's calls
/// are held to the policy: a read of whole endpoints by the events function fails.)
#[test]
fn the_events_function_cannot_read_webhook_secrets() {
    let t = template();
    let policies = &t["Resources"]["EventsFunction"]["Properties"]["Policies"];
    let limited: Vec<Vec<String>> = policies
        .as_sequence()
        .into_iter()
        .flatten()
        .flat_map(|p| p["Statement"].as_sequence().cloned().unwrap_or_default())
        .filter(|st| {
            serde_yaml_ng::to_string(&st["Condition"])
                .unwrap()
                .contains("WEBHOOKS#")
        })
        .map(|st| {
            st["Condition"]["ForAllValues:StringEquals"]["dynamodb:Attributes"]
                .as_sequence()
                .map(|a| a.iter().map(s).collect())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(limited.len(), 1, "one statement reads WEBHOOKS#");
    let expected: Vec<String> = domain::store::webhooks::TARGET_ATTRIBUTES
        .iter()
        .map(|a| a.to_string())
        .collect();
    assert_eq!(limited[0], expected);
    assert!(!limited[0].iter().any(|a| a == "secrets"));
}
