//! The chain client's own tests (the node's answers are the end-to-end tests', on the real
//! rails and the double).

use super::*;

/// The words nodes refuse a log range with narrow it; a passing failure, a rate limit, a
/// revert or a timeout does not.
#[test]
fn only_a_refused_range_narrows_the_search() {
    let refusal = |error: Value| rpc_error("eth_getLogs", &error);
    for refused in [
        json!({"code": -32602, "message": "block range too large: at most 500 blocks"}),
        json!({"code": -32600, "message": "exceed maximum block range: 2000"}),
        json!({"code": -32005, "message": "query returned more than 10000 results"}),
        json!({"code": -32000, "message": "eth_getLogs is limited to a 1000 block range"}),
    ] {
        assert!(refuses_range(&refusal(refused.clone())), "{refused}");
    }
    let busy = refusal(json!({"code": -32603, "message": "internal error: upstream busy"}));
    assert!(!refuses_range(&busy));
    for throttled in [
        json!({"code": -32005, "message": "daily request count exceeded, request rate limited"}),
        json!({"code": -32005, "message": "limit exceeded"}),
    ] {
        assert!(!refuses_range(&refusal(throttled.clone())), "{throttled}");
    }
    assert!(!refuses_range(&ChainError::Timeout));
    assert!(!refuses_range(&ChainError::Transport("HTTP 502".into())));
}

/// The topic hashes of `reference/x402.md` §9.1.
#[test]
fn topics_are_the_references() {
    let hex: Vec<String> = TOPICS.iter().map(|t| t.to_string()).collect();
    assert_eq!(
        hex,
        [
            "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef",
            "0x98de503528ee59b575ef0c0a2576a82497bfc029a5685b209e9ec333479b10a5",
            "0x1cdd46ff242716cdaa72d159d339a485b3438398348d68f09d7c8c0a59353d81",
        ]
    );
}

const USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
const TREASURY: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const NONCE: &str = "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480";

fn wanted() -> Wanted {
    Wanted::of(&Authorization {
        asset: USDC,
        payer: PAYER,
        nonce: NONCE,
        pay_to: TREASURY,
        amount: 10_000,
        since: 0,
        scanned: None,
    })
    .unwrap()
}

fn topic(address: &str) -> String {
    address.parse::<Address>().unwrap().into_word().to_string()
}

fn used(contract: &str) -> Value {
    json!({"address": contract, "topics": [TOPICS[1].to_string(), topic(PAYER), NONCE],
           "data": "0x"})
}

fn transfer(contract: &str, to: &str, value: u64) -> Value {
    json!({"address": contract,
           "topics": [TOPICS[0].to_string(), topic(PAYER), topic(to)],
           "data": format!("0x{:064x}", value)})
}

fn judge(success: bool, logs: Vec<Value>) -> Option<Evidence> {
    wanted().judge(
        "0xabc",
        &Receipt {
            success,
            block: 7,
            block_hash: B256::repeat_byte(7),
            logs,
        },
    )
}

/// An ERC-6492 wrapper is unwrapped to the signature its account judges; anything else is
/// judged as it is; a wrapper that does not decode is nobody's.
#[test]
fn an_erc6492_wrapper_is_unwrapped() {
    let inner = Bytes::from(vec![0x42; 70]);
    let factory: Address = TREASURY.parse().unwrap();
    let body = (factory, Bytes::from(vec![1, 2, 3]), inner.clone()).abi_encode_params();
    let wrapped = [body.as_slice(), &ERC6492_SUFFIX].concat();
    let parsed = SmartSignature::parse(&wrapped).unwrap();
    assert_eq!((parsed.inner, parsed.wrapped), (inner.clone(), true));
    let plain = SmartSignature::parse(&inner).unwrap();
    assert_eq!((plain.inner, plain.wrapped), (inner, false));
    assert_eq!(
        SmartSignature::parse(&[&[7u8; 10][..], &ERC6492_SUFFIX].concat()),
        None
    );
}

/// Each check of `judge` has a case that fails without it.
#[test]
fn only_our_transfer_is_paid() {
    let paid = Some(Evidence::Paid {
        transaction: "0xabc".into(),
        block: 7,
        block_hash: B256::repeat_byte(7),
    });
    assert_eq!(
        judge(true, vec![used(USDC), transfer(USDC, TREASURY, 10_000)]),
        paid
    );
    assert_eq!(
        judge(true, vec![used(USDC), transfer(USDC, TREASURY, 10_001)]),
        paid
    );
    // Reverted: nothing happened.
    assert_eq!(
        judge(false, vec![used(USDC), transfer(USDC, TREASURY, 10_000)]),
        None
    );
    // Not this authorization.
    assert_eq!(judge(true, vec![transfer(USDC, TREASURY, 10_000)]), None);
    // Another contract's log is not USDC's.
    let other = "0x0000000000000000000000000000000000000001";
    assert_eq!(
        judge(true, vec![used(other), transfer(USDC, TREASURY, 10_000)]),
        None
    );
    let elsewhere = |logs| matches!(judge(true, logs), Some(Evidence::Elsewhere { .. }));
    // Used, but the money went to the payer himself, or was 1 unit, or came from another
    // contract, or the transfer is not the one that follows the use.
    assert!(elsewhere(vec![used(USDC), transfer(USDC, PAYER, 10_000)]));
    assert!(elsewhere(vec![used(USDC), transfer(USDC, TREASURY, 1)]));
    assert!(elsewhere(vec![
        used(USDC),
        transfer(other, TREASURY, 10_000)
    ]));
    assert!(elsewhere(vec![
        transfer(USDC, TREASURY, 10_000),
        used(USDC),
        transfer(USDC, PAYER, 10_000)
    ]));
    assert!(elsewhere(vec![used(USDC)]));
}
