//! The doubles held to the real thing: one table of payment scenarios runs against the real
//! rails (anvil with Circle's FiatTokenV2_2, x402's own facilitator) and against the development
//! chain and facilitator (`e2e::chain`, `e2e::facilitator`), through the service's own adapters
//! (`x402::facilitator` for verify and settle, `x402::chain` for the evidence), and what each
//! side answers must agree: what `x402::chain` says of the payment before anything is recorded
//! (`standing`: signed, funded, nonce used — one JSON-RPC batch), verify (`isValid`,
//! `invalidReason`, `payer`), settle (`success`, `errorReason`, `payer`, whether a transaction is
//! named) and what `x402::chain` concludes afterwards.
//! Where they differ, the double is wrong. The smart wallet is a deployed Solady ERC-4337
//! account signing as viem does on the rails, and on the doubles an account that accepts exactly
//! its signature (ERC-1271 asks the account, nothing more).

use std::sync::Arc;
use std::time::Duration;

use alloy_primitives::{Address, B256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use base64::Engine;
use domain::x402::chain::{Authorization, Chain, Evidence};
use domain::x402::facilitator::{Facilitator, FacilitatorAuth, PaymentRequest, Settlement};
use domain::x402::{Network, Offer, PaymentRequired};
use e2e::facilitator::DevFacilitator;
use serde_json::Value;

use crate::harness::TREASURY;
use crate::rails::{NETWORK, Rails};

/// USDC atomic units each scenario pays.
const AMOUNT: u128 = 10_000;

/// What a payer does, or what is wrong with the payment.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Scenario {
    Valid,
    SameNonceTwice,
    Cancelled,
    ValidBeforePassed,
    InsufficientBalance,
    WrongRecipient,
    WrongAmount,
    NotAnEoaSignature,
    SpentBetweenVerifyAndSettle,
    SmartWallet,
    /// A smart wallet whose ERC-1271 check passes only for a zero `tx.origin` (a call without
    /// a sender), never in a settlement's transaction.
    WalletThatLiesToSimulations,
}

const SCENARIOS: [Scenario; 11] = [
    Scenario::Valid,
    Scenario::SameNonceTwice,
    Scenario::Cancelled,
    Scenario::ValidBeforePassed,
    Scenario::InsufficientBalance,
    Scenario::WrongRecipient,
    Scenario::WrongAmount,
    Scenario::NotAnEoaSignature,
    Scenario::SpentBetweenVerifyAndSettle,
    Scenario::SmartWallet,
    Scenario::WalletThatLiesToSimulations,
];

/// One side: the real rails, or the doubles.
enum Side {
    Real(Rails),
    Double(Arc<DevFacilitator>, String),
}

/// What one side answered, in comparable form (addresses lowercase).
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    /// (signed, balance ≥ the amount, nonce used) before verify.
    standing: Result<(bool, bool, bool), String>,
    verify: (bool, Option<String>, Option<String>),
    settle: (String, Option<String>, Option<String>, bool),
    evidence: String,
}

impl Side {
    fn urls(&self) -> (String, String) {
        match self {
            Side::Real(r) => (r.facilitator_url.clone(), r.rpc_url.clone()),
            Side::Double(_, url) => (url.clone(), format!("{url}/rpc")),
        }
    }

    async fn fund(&self, payer: Address, scenario: Scenario) {
        match (self, scenario) {
            (Side::Real(_), Scenario::InsufficientBalance) => {}
            (Side::Real(rails), _) => rails.fund(payer, AMOUNT).await,
            (Side::Double(f, _), Scenario::InsufficientBalance) => {
                f.chain().set_balance(&format!("{payer:#x}"), 0)
            }
            (Side::Double(..), _) => {}
        }
    }

    async fn cancel(&self, payer: &PrivateKeySigner, nonce: B256) {
        match self {
            Side::Real(rails) => {
                rails.cancel(payer, nonce).await;
            }
            Side::Double(f, _) => {
                f.cancel(&format!("{:#x}", payer.address()), &format!("{nonce:#x}"));
            }
        }
    }

    /// A deployed smart wallet's payment (ERC-1271): on the rails, Solady's account signs as
    /// viem does; on the doubles, an account is deployed that accepts exactly that signature
    /// (ERC-1271 leaves the judgement to the account). A wallet that `lies` to simulations is,
    /// on the rails, `OriginWallet.sol` (any signature); on the doubles, an account that
    /// accepts its signature only from a call without a sender. The account's address and the
    /// payload.
    async fn smart_wallet_payment(&self, nonce: B256, lies: bool) -> (Address, Value) {
        let now = domain::time::now().unix_timestamp() as u64;
        let authorization = serde_json::json!({
            "to": TREASURY, "value": AMOUNT.to_string(), "validAfter": "0",
            "validBefore": (now + 120).to_string(), "nonce": format!("{nonce:#x}"),
        });
        let (from, signature) = match self {
            Side::Real(rails) if lies => {
                rails.fund(rails.origin_wallet, AMOUNT).await;
                let signature = format!("0x{}", domain::ids::random_hex(200));
                (rails.origin_wallet, signature)
            }
            Side::Real(rails) => {
                let (from, signature) = rails.smart_wallet_signs(&authorization).await;
                rails.fund(from, AMOUNT).await;
                (from, signature)
            }
            Side::Double(f, _) => {
                let from = PrivateKeySigner::random().address();
                let signature = format!("0x{}", domain::ids::random_hex(200));
                let message = domain::x402::verify::TransferWithAuthorization {
                    from,
                    to: TREASURY.parse().unwrap(),
                    value: alloy_primitives::U256::from(AMOUNT),
                    validAfter: alloy_primitives::U256::ZERO,
                    validBefore: alloy_primitives::U256::from(now + 120),
                    nonce,
                };
                let digest = domain::x402::verify::signing_hash(NETWORK, &message);
                let account = format!("{from:#x}");
                if lies {
                    f.chain()
                        .deploy_origin_account(&account, digest, &signature);
                } else {
                    f.chain().deploy_account(&account, digest, &signature);
                }
                (from, signature)
            }
        };
        let mut signed = authorization;
        signed["from"] = Value::from(format!("{from:#x}"));
        let required = offer().payment_required("");
        let payload = serde_json::json!({
            "x402Version": 2,
            "resource": required.resource,
            "accepted": offer().v2(),
            "payload": {"signature": signature, "authorization": signed},
        });
        (from, payload)
    }

    async fn spend_elsewhere(&self, payer: &PrivateKeySigner, nonce: B256) {
        let to = payer.address();
        match self {
            Side::Real(rails) => {
                rails.spend_elsewhere(payer, nonce, to, 1).await;
            }
            Side::Double(f, _) => {
                let (from, to) = (format!("{:#x}", payer.address()), format!("{to:#x}"));
                f.spend_elsewhere(&from, &format!("{nonce:#x}"), &to, 1);
            }
        }
    }
}

fn offer() -> Offer {
    Offer {
        network: NETWORK,
        pay_to: TREASURY.to_ascii_lowercase(),
        amount: AMOUNT,
        max_timeout_seconds: 120,
        resource: "https://api.example.test/api/cloud/servers/1".into(),
        description: "the contract table".into(),
    }
}

/// The payment payload `payer` sends for `scenario` (what is signed may differ from the offer).
fn payload(payer: &PrivateKeySigner, nonce: B256, scenario: Scenario) -> Value {
    let mut signed = offer();
    let mut now = domain::time::now().unix_timestamp() as u64;
    match scenario {
        Scenario::WrongRecipient => signed.pay_to = format!("{:#x}", payer.address()),
        Scenario::WrongAmount => signed.amount = AMOUNT - 1,
        Scenario::ValidBeforePassed => now -= 200,
        _ => {}
    }
    let required: PaymentRequired = offer().payment_required("");
    let mut draft_required = signed.payment_required("");
    draft_required.resource = required.resource.clone();
    let draft = domain::x402::client::Draft::new(2, &draft_required, payer.address(), now, nonce.0)
        .unwrap();
    let signature = payer.sign_hash_sync(&draft.signing_hash()).unwrap();
    let header = draft.header(&signature.as_bytes());
    let mut payload: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(header)
            .unwrap(),
    )
    .unwrap();
    // The offer accepted is ours, whatever was signed.
    payload["accepted"] = serde_json::to_value(offer().v2()).unwrap();
    if scenario == Scenario::NotAnEoaSignature {
        payload["payload"]["signature"] = Value::from(format!("0x{}", "ab".repeat(100)));
    }
    payload
}

/// What the chain says of `payload` (v2, our offer) before anything is recorded, as the paid
/// path asks it: the offline checks, then [`Chain::standing`].
async fn standing(chain: &Chain, payload: &Value) -> Result<(bool, bool, bool), String> {
    let (typed, raw) = domain::x402::verify::decode(&domain::x402::encode_header(payload))
        .map_err(|e| e.to_string())?;
    let now = domain::time::now().unix_timestamp() as u64;
    let verified = domain::x402::verify::verify(2, &typed, raw, &offer(), now)
        .map_err(|e| format!("offline: {e}"))?;
    let sender = domain::config::SETTLEMENT_SENDER.parse().unwrap();
    let transfer = domain::x402::chain::PendingTransfer::of(&verified, sender).unwrap();
    let standing = chain.standing(&transfer).await.map_err(|e| e.to_string())?;
    let funded = standing.balance >= alloy_primitives::U256::from(AMOUNT);
    Ok((standing.signed, funded, standing.nonce_used))
}

/// An answer's `payer`: "the payer" when it names this run's payer (each side pays from a key
/// of its own), else as answered.
fn payer_of(value: Option<String>, payer: Address) -> Option<String> {
    value.map(|v| match v.parse::<Address>() {
        Ok(address) if address == payer => "the payer".to_owned(),
        _ => v,
    })
}

async fn run(side: &Side, scenario: Scenario) -> Seen {
    let payer = PrivateKeySigner::random();
    let mut nonce = [0u8; 32];
    getrandom::fill(&mut nonce).unwrap();
    let nonce = B256::from(nonce);
    let (facilitator_url, rpc_url) = side.urls();
    let facilitator = Facilitator::new(
        &facilitator_url,
        FacilitatorAuth::None,
        Duration::from_secs(30),
    );
    let (from, payload) = if scenario == Scenario::SmartWallet {
        side.smart_wallet_payment(nonce, false).await
    } else if scenario == Scenario::WalletThatLiesToSimulations {
        side.smart_wallet_payment(nonce, true).await
    } else {
        side.fund(payer.address(), scenario).await;
        (payer.address(), payload(&payer, nonce, scenario))
    };
    let requirements = serde_json::to_value(offer().v2()).unwrap();
    let request = PaymentRequest {
        version: 2,
        payload: &payload,
        requirements: &requirements,
    };
    if scenario == Scenario::Cancelled {
        side.cancel(&payer, nonce).await;
    }
    let chain = Chain::new(&rpc_url, Duration::from_secs(5), Network::BaseSepolia);
    let standing = standing(&chain, &payload).await;
    let verdict = facilitator.verify(&request).await.expect("a verify answer");
    if scenario == Scenario::SpentBetweenVerifyAndSettle {
        side.spend_elsewhere(&payer, nonce).await;
    }
    let mut settlement = facilitator.settle(&request).await;
    if scenario == Scenario::SameNonceTwice {
        settlement = facilitator.settle(&request).await;
    }
    let (kind, response) = match settlement.expect("a settle answer") {
        Settlement::Settled(r) => ("settled", r),
        Settlement::Pending(r) => ("pending", r),
        Settlement::Failed(r) => ("failed", r),
    };
    let payer_hex = format!("{from:#x}");
    let nonce_hex = format!("{nonce:#x}");
    let authorization = Authorization {
        asset: NETWORK.usdc(),
        payer: &payer_hex,
        nonce: &nonce_hex,
        pay_to: TREASURY,
        amount: AMOUNT,
        since: domain::time::now().unix_timestamp() - 120,
        scanned: None,
    };
    let known = Some(response.transaction.as_str()).filter(|t| !t.is_empty());
    let evidence = match chain.evidence(&authorization, known).await {
        Ok(Evidence::Paid { .. }) => "paid".to_owned(),
        Ok(Evidence::Elsewhere { .. }) => "elsewhere".to_owned(),
        Ok(Evidence::Unused { .. }) => "unused".to_owned(),
        Err(err) => format!("error: {err}"),
    };
    Seen {
        standing,
        verify: (
            verdict.is_valid,
            verdict.invalid_reason,
            payer_of(verdict.payer, from),
        ),
        settle: (
            kind.to_owned(),
            response.error_reason,
            payer_of(response.payer, from),
            !response.transaction.is_empty(),
        ),
        evidence,
    }
}

/// Every scenario of the table, on the real rails and on the doubles: the answers agree.
#[tokio::test]
async fn the_doubles_answer_as_the_real_rails_do() {
    let real = Side::Real(Rails::from_env());
    let double = DevFacilitator::new();
    let (url, _serving) = double.start("127.0.0.1:0").await.unwrap();
    let double = Side::Double(double, url);
    let mut differences = Vec::new();
    for scenario in SCENARIOS {
        let (on_rails, on_double) = tokio::join!(run(&real, scenario), run(&double, scenario));
        println!("{scenario:?}: real {on_rails:?}");
        if on_rails != on_double {
            differences.push(format!(
                "{scenario:?}:\n  real   {on_rails:?}\n  double {on_double:?}"
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// A node of another chain than the network payments are taken on is refused before anything
/// is read from it, naming the chain it serves and the network (`RPC_URL` against
/// `X402_NETWORK`): on the real rails (anvil serves Base Sepolia) and on the double alike, and a
/// client of the right network reads on.
#[tokio::test]
async fn a_node_of_another_chain_is_refused_naming_both() {
    let double = DevFacilitator::new();
    let (url, _serving) = double.start("127.0.0.1:0").await.unwrap();
    for side in [Side::Real(Rails::from_env()), Side::Double(double, url)] {
        let (_, rpc_url) = side.urls();
        let nonce = format!("{:#x}", B256::repeat_byte(7));
        let authorization = Authorization {
            asset: NETWORK.usdc(),
            payer: "0x1111111111111111111111111111111111111111",
            nonce: &nonce,
            pay_to: TREASURY,
            amount: AMOUNT,
            since: domain::time::now().unix_timestamp() - 120,
            scanned: None,
        };
        let wrong = Chain::new(&rpc_url, Duration::from_secs(5), Network::Base);
        let refused = wrong.evidence(&authorization, None).await;
        let Err(err) = refused else {
            panic!("{rpc_url}: a Base client read a Base Sepolia node: {refused:?}");
        };
        assert!(
            matches!(
                err,
                domain::x402::chain::ChainError::WrongChain {
                    served: 84532,
                    expected: 8453,
                    ..
                }
            ),
            "{rpc_url}: {err}"
        );
        let message = err.to_string();
        assert!(
            message.contains("RPC_URL serves chain 84532")
                && message.contains("X402_NETWORK is base"),
            "{message}"
        );
        // Asked again, refused again: a mismatch is never remembered as checked.
        assert!(wrong.evidence(&authorization, None).await.is_err());
        let right = Chain::new(&rpc_url, Duration::from_secs(5), Network::BaseSepolia);
        let evidence = right.evidence(&authorization, None).await;
        assert!(
            matches!(evidence, Ok(Evidence::Unused { .. })),
            "{rpc_url}: {evidence:?}"
        );
    }
}

/// A node whose `eth_getLogs` cap is lower than the client's first range is asked again with
/// narrower ranges until it answers, and the client keeps the range it answered (the double
/// refuses ranges as public nodes do; the rails' anvil refuses none). That a node's passing
/// failure narrows nothing: `chain::tests`.
#[tokio::test]
async fn a_lower_log_range_cap_is_met_by_narrower_ranges() {
    let double = DevFacilitator::new();
    let (url, _serving) = double.start("127.0.0.1:0").await.unwrap();
    let chain = Chain::new(
        &format!("{url}/rpc"),
        Duration::from_secs(5),
        Network::BaseSepolia,
    );
    let nonce = format!("{:#x}", B256::repeat_byte(9));
    let authorization = Authorization {
        asset: NETWORK.usdc(),
        payer: "0x2222222222222222222222222222222222222222",
        nonce: &nonce,
        pay_to: TREASURY,
        amount: AMOUNT,
        // Long before the chain's first block: the search spans the whole chain.
        since: domain::time::now().unix_timestamp() - 30 * 24 * 3600,
        scanned: None,
    };
    let evidence = chain.evidence(&authorization, None).await;
    assert!(
        matches!(evidence, Ok(Evidence::Unused { .. })),
        "{evidence:?}"
    );
    assert_eq!(chain.log_range(), domain::x402::chain::LOG_RANGE);
    double.chain().cap_log_range(500);
    let evidence = chain.evidence(&authorization, None).await;
    assert!(
        matches!(evidence, Ok(Evidence::Unused { .. })),
        "{evidence:?}"
    );
    let range = chain.log_range();
    assert!((250..500).contains(&range), "{range}");
    // The range is kept: the next search asks no wider.
    let again = chain.evidence(&authorization, None).await;
    assert!(matches!(again, Ok(Evidence::Unused { .. })), "{again:?}");
    assert_eq!(chain.log_range(), range);
}

/// A search remembers how far it read ([`Authorization::scanned`]): the next one asks for the
/// blocks from `MARGIN_BLOCKS` before where the last stopped, not from `since` again; and a use
/// older than that margin (a deeper reorganisation, a hint that was wrong) is still found, the
/// chain read again from `since` once the nonce shows used.
#[tokio::test]
async fn a_search_starts_where_the_last_one_stopped() {
    use domain::x402::chain::MARGIN_BLOCKS;
    let clock = domain::clock::Clock::manual(domain::time::now().unix_timestamp());
    let double = DevFacilitator::with_clock(clock.clone());
    let (url, _serving) = double.start("127.0.0.1:0").await.unwrap();
    let chain = Chain::new(
        &format!("{url}/rpc"),
        Duration::from_secs(5),
        Network::BaseSepolia,
    );
    double.chain().cap_log_range(500);
    let payer = "0x3333333333333333333333333333333333333333";
    let nonce = format!("{:#x}", B256::repeat_byte(7));
    let mut authorization = Authorization {
        asset: NETWORK.usdc(),
        payer,
        nonce: &nonce,
        pay_to: TREASURY,
        amount: AMOUNT,
        // Before the chain's first block: the first search spans the whole chain.
        since: clock.now() - 3 * 3600,
        scanned: None,
    };
    let Ok(Evidence::Unused { head, .. }) = chain.evidence(&authorization, None).await else {
        panic!("unused");
    };
    let first = double.chain().log_queries();
    assert_eq!(first[0].0, 0, "{first:?}");
    // Two minutes on: the next search reads the margin and the sixty new blocks only.
    clock.advance(Duration::from_secs(120));
    authorization.scanned = Some(head);
    let Ok(Evidence::Unused { head: next, .. }) = chain.evidence(&authorization, None).await else {
        panic!("unused");
    };
    let second = double.chain().log_queries()[first.len()..].to_vec();
    assert_eq!(next, head + 60);
    assert_eq!(
        second.first().map(|q| q.0),
        Some((head - MARGIN_BLOCKS) as i64)
    );
    assert_eq!(second.last().map(|q| q.1), Some(next as i64));
    let asked: i64 = second.iter().map(|(from, to)| to - from + 1).sum();
    assert_eq!(asked, (MARGIN_BLOCKS + 61) as i64, "{second:?}");
    // Paid now, read much later with a hint past it by more than the margin: found anyway.
    double.chain().broadcast(
        payer,
        &nonce,
        e2e::chain::Use::Transfer {
            to: TREASURY.to_ascii_lowercase(),
            value: AMOUNT,
        },
        Duration::ZERO,
    );
    clock.advance(Duration::from_secs(3600));
    authorization.scanned = Some(next + 1_800);
    let found = chain.evidence(&authorization, None).await;
    assert!(matches!(found, Ok(Evidence::Paid { .. })), "{found:?}");
}
