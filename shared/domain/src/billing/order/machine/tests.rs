//! The transition table, case by case for each rule, then swept whole: every state × every
//! event × every combination of the facts that decide, checked against the money invariants.

use serde_json::json;

use super::*;

const NOW: i64 = 1_800_000_000;

fn facts() -> Facts {
    Facts {
        now: NOW,
        valid_before: NOW + 120,
        deadline_at: NOW + 300,
        create_sent_at: None,
        create_settle: 300,
        lease: 60,
        creates: (0, 3),
        settle_calls: 0,
        answered: false,
        room: true,
        provider_room: true,
        renewal: false,
        refusal: None,
    }
}

fn server() -> Value {
    json!({"id": 912001})
}

#[test]
fn a_claim_is_verified_then_settled_with_the_intent_written_first() {
    let f = facts();
    assert_eq!(
        next(State::Claimed, &Event::Resumed, &f),
        stay(State::Claimed, Effect::Verify)
    );
    for verdict in [Verdict::Valid, Verdict::Unknown] {
        assert_eq!(
            next(State::Claimed, &Event::Verified(verdict), &f),
            go(State::Settling, Write::Settling, Effect::Settle)
        );
    }
    let refused = next(
        State::Claimed,
        &Event::Verified(Verdict::Invalid("insufficient_funds".into())),
        &f,
    );
    assert_eq!(
        refused,
        go(
            State::Claimed,
            Write::Refusal("insufficient_funds".into()),
            Effect::LookUp
        )
    );
}

/// A facilitator's "invalid" ends a claimed order only once the chain shows the authorization
/// did not pay us: the payer may have sent this very transfer himself (or someone holding the
/// payload did), and then the treasury has the money and the facilitator calls it used.
#[test]
fn a_refused_claim_is_looked_up_before_it_ends() {
    let refused = Facts {
        refusal: Some("invalid_exact_evm_nonce_already_used".into()),
        ..facts()
    };
    // Resumed, it is looked up as of its refusal, never verified again (which would move the
    // time the chain's node must reach: `effects::look_up`).
    assert_eq!(
        next(State::Claimed, &Event::Resumed, &refused),
        stay(State::Claimed, Effect::LookUp)
    );
    let paid = Event::Looked(Chain::Paid("0xabc".into()));
    assert_eq!(
        next(State::Claimed, &paid, &refused),
        go(
            State::Settled,
            Write::Settled("0xabc".into()),
            Effect::Continue
        )
    );
    for final_ in [false, true] {
        assert_eq!(
            next(
                State::Claimed,
                &Event::Looked(Chain::Unused { final_ }),
                &refused
            ),
            go(
                State::Rejected,
                Write::Rejected("invalid_exact_evm_nonce_already_used".into()),
                Effect::Finish
            )
        );
    }
    let elsewhere = Event::Looked(Chain::Elsewhere("cancelled".into()));
    assert_eq!(
        next(State::Claimed, &elsewhere, &refused).to,
        State::Rejected
    );
    let unknown = Event::Looked(Chain::Unknown("no node".into()));
    assert_eq!(
        next(State::Claimed, &unknown, &refused),
        pause(State::Claimed, "no node")
    );
    // Without time to ask the chain: the refusal is recorded and the order waits.
    let busy = Facts {
        room: false,
        ..facts()
    };
    let invalid = Event::Verified(Verdict::Invalid("insufficient_funds".into()));
    assert_eq!(
        next(State::Claimed, &invalid, &busy),
        go(
            State::Claimed,
            Write::Refusal("insufficient_funds".into()),
            Effect::Pause(NOT_SETTLED_YET.into())
        )
    );
}

#[test]
fn a_claim_whose_window_closed_expires_and_one_without_time_waits() {
    let closed = Facts {
        now: NOW + 115,
        ..facts()
    };
    // Never settled by us: expired once the chain shows it unused for good, never before (the
    // payload may still pay us by someone else's hand).
    assert_eq!(
        next(State::Claimed, &Event::Resumed, &closed),
        stay(State::Claimed, Effect::LookUp)
    );
    let unused = |final_| Event::Looked(Chain::Unused { final_ });
    assert_eq!(
        next(State::Claimed, &unused(false), &closed),
        pause(State::Claimed, NOT_SETTLED_YET)
    );
    assert_eq!(
        next(State::Claimed, &unused(true), &closed).to,
        State::Expired
    );
    let paid = Event::Looked(Chain::Paid("0xabc".into()));
    assert_eq!(next(State::Claimed, &paid, &closed).to, State::Settled);
    assert_eq!(
        next(State::Claimed, &Event::Verified(Verdict::Valid), &closed).to,
        State::Claimed
    );
    let busy = Facts {
        room: false,
        ..facts()
    };
    let slow = Facts {
        provider_room: false,
        ..facts()
    };
    assert_eq!(
        next(State::Claimed, &Event::Resumed, &slow).effect,
        Effect::Verify
    );
    assert!(matches!(
        next(State::Settled, &Event::Resumed, &slow).effect,
        Effect::Pause(_)
    ));
    assert!(matches!(
        next(State::Claimed, &Event::Resumed, &busy).effect,
        Effect::Pause(_)
    ));
}

/// Scenario 1 (a free server): the payer spent the nonce elsewhere; the settle fails "already
/// used"; only evidence of our transfer is payment.
#[test]
fn a_nonce_spent_elsewhere_is_rejected_never_paid() {
    let f = facts();
    let reason = "invalid_exact_evm_nonce_already_used";
    let failed = Event::Settled(Answer::Failed(reason.into()));
    assert_eq!(
        next(State::Settling, &failed, &f),
        go(
            State::Settling,
            Write::Refusal(reason.into()),
            Effect::LookUp
        )
    );
    let elsewhere = Event::Looked(Chain::Elsewhere("cancelled".into()));
    assert_eq!(
        next(State::Settling, &elsewhere, &f),
        go(
            State::Rejected,
            Write::Rejected("cancelled".into()),
            Effect::Finish
        )
    );
}

/// Scenario 2 (charged, then asked to pay again): a failure answer and a lagging node's
/// "unused" never end a settling order.
#[test]
fn a_failure_after_broadcast_waits_for_evidence() {
    let f = facts();
    let unused = Event::Looked(Chain::Unused { final_: false });
    // Still valid: settle again (the contract moves the money at most once).
    assert_eq!(
        next(State::Settling, &unused, &f),
        stay(State::Settling, Effect::Settle)
    );
    // Refused once by this attempt, out of settle calls, or out of the window: wait, never
    // reject.
    for f in [
        Facts {
            answered: true,
            ..facts()
        },
        Facts {
            settle_calls: SETTLE_CALLS,
            ..facts()
        },
        Facts {
            now: NOW + 119,
            ..facts()
        },
        Facts {
            room: false,
            ..facts()
        },
    ] {
        assert_eq!(
            next(State::Settling, &unused, &f),
            pause(State::Settling, NOT_SETTLED_YET)
        );
    }
    let paid = Event::Looked(Chain::Paid("0xabc".into()));
    assert_eq!(
        next(State::Settling, &paid, &f),
        go(
            State::Settled,
            Write::Settled("0xabc".into()),
            Effect::Continue
        )
    );
    // Just paid, nothing announced: the first create, without a search.
    assert_eq!(
        next(State::Settled, &Event::Resumed, &f),
        go(State::Creating, Write::Creating, Effect::Create)
    );
    let announced = Facts {
        creates: (1, 3),
        ..facts()
    };
    assert_eq!(
        next(State::Settled, &Event::Resumed, &announced).effect,
        Effect::Search
    );
    let final_ = Event::Looked(Chain::Unused { final_: true });
    assert_eq!(next(State::Settling, &final_, &f).to, State::Expired);
}

/// A facilitator's `success: true` is not payment: its transaction is recorded and read back
/// from the chain, and only our transfer there settles the order. A receipt the node does not
/// show yet waits; the same attempt does not settle again.
#[test]
fn a_facilitators_success_is_checked_on_chain() {
    let success = Event::Settled(Answer::Success("0xabc".into()));
    assert_eq!(
        next(State::Settling, &success, &facts()),
        go(
            State::Settling,
            Write::Transaction("0xabc".into()),
            Effect::LookUp
        )
    );
    let answered = Facts {
        answered: true,
        settle_calls: 1,
        ..facts()
    };
    let unseen = Event::Looked(Chain::Unused { final_: false });
    assert_eq!(
        next(State::Settling, &unseen, &answered),
        pause(State::Settling, NOT_SETTLED_YET)
    );
    let elsewhere = Event::Looked(Chain::Elsewhere("paid someone else".into()));
    assert_eq!(
        next(State::Settling, &elsewhere, &answered).to,
        State::Rejected
    );
    let paid = Event::Looked(Chain::Paid("0xabc".into()));
    assert_eq!(next(State::Settling, &paid, &answered).to, State::Settled);
}

#[test]
fn a_pending_settlement_is_asked_again_then_looked_up() {
    let pending = Event::Settled(Answer::Pending(Some("0xabc".into())));
    assert_eq!(
        next(
            State::Settling,
            &pending,
            &Facts {
                settle_calls: 1,
                ..facts()
            }
        ),
        go(
            State::Settling,
            Write::Transaction("0xabc".into()),
            Effect::Settle
        )
    );
    assert_eq!(
        next(
            State::Settling,
            &pending,
            &Facts {
                settle_calls: SETTLE_CALLS,
                ..facts()
            }
        ),
        go(
            State::Settling,
            Write::Transaction("0xabc".into()),
            Effect::LookUp
        )
    );
}

#[test]
fn a_settled_renewal_extends_its_lease() {
    let f = Facts {
        renewal: true,
        ..facts()
    };
    let paid = Event::Looked(Chain::Paid("0xabc".into()));
    assert_eq!(next(State::Settling, &paid, &f).effect, Effect::Extend);
    assert_eq!(
        next(State::Settled, &Event::Resumed, &f),
        stay(State::Settled, Effect::Extend)
    );
    assert_eq!(
        next(State::Settled, &Event::Extended(Extension::Done), &f),
        stay(State::Provisioned, Effect::Finish)
    );
    assert_eq!(
        next(
            State::Settled,
            &Event::Extended(Extension::Gone("deleted".into())),
            &f
        )
        .to,
        State::Credited
    );
}

/// Scenario 3 (two servers for one payment): no second create while the first may land — and
/// it may land until its intent's lease ended (the latest it could be sent) plus the settle
/// time. Counted from the intent alone, a create sent by a holder that stalled after writing it
/// was taken for one that never landed (the simulation's seed 1170: two servers).
#[test]
fn an_unclear_create_waits_its_settle_time_before_another() {
    let sent = Facts {
        create_sent_at: Some(NOW),
        creates: (1, 3),
        ..facts()
    };
    assert_eq!(
        next(State::Creating, &Event::Created(Create::Unclear), &sent),
        stay(State::Creating, Effect::Search)
    );
    let missing = Event::Searched(Search::Missing);
    assert_eq!(
        next(State::Creating, &missing, &sent),
        pause(State::Creating, CREATE_MAY_LAND)
    );
    // Even past the order's deadline: no credit while the create may land.
    let late = Facts {
        now: NOW + 359,
        deadline_at: NOW - 1,
        ..sent.clone()
    };
    assert_eq!(
        next(State::Creating, &missing, &late),
        pause(State::Creating, CREATE_MAY_LAND)
    );
    let settled = Facts {
        now: NOW + 360,
        ..sent.clone()
    };
    assert_eq!(
        next(State::Creating, &missing, &settled),
        go(State::Creating, Write::Creating, Effect::Create)
    );
    let found = Event::Searched(Search::Found(server()));
    assert_eq!(
        next(State::Creating, &found, &sent).write,
        Write::Provisioned(server())
    );
}

#[test]
fn creates_end_in_a_credit_on_refusal_deadline_or_attempts() {
    let f = facts();
    assert_eq!(
        next(
            State::Creating,
            &Event::Created(Create::Refused("HTTP 400".into())),
            &f
        ),
        credit("HTTP 400")
    );
    let missing = Event::Searched(Search::Missing);
    assert_eq!(
        next(
            State::Settled,
            &missing,
            &Facts {
                now: NOW + 301,
                ..facts()
            }
        )
        .to,
        State::Credited
    );
    assert_eq!(
        next(
            State::Creating,
            &missing,
            &Facts {
                creates: (3, 3),
                ..facts()
            }
        )
        .to,
        State::Credited
    );
    // Past the deadline, creates known not to have landed are tried again.
    let retried = Facts {
        now: NOW + 361,
        creates: (1, 3),
        create_sent_at: Some(NOW - 1),
        ..facts()
    };
    assert_eq!(
        next(State::Creating, &missing, &retried).effect,
        Effect::Create
    );
    assert_eq!(
        next(State::Settled, &missing, &f),
        go(State::Creating, Write::Creating, Effect::Create)
    );
    assert_eq!(
        next(State::Creating, &Event::Created(Create::RateLimited), &f).write,
        Write::CreateUndone
    );
}

/// A failing search never blocks the credit of an order that never sent a create.
#[test]
fn a_failing_search_credits_only_an_order_that_never_sent_a_create() {
    let failed = Event::Searched(Search::Failed("HTTP 403".into()));
    let late = Facts {
        now: NOW + 301,
        ..facts()
    };
    assert_eq!(next(State::Settled, &failed, &late).to, State::Credited);
    assert_eq!(
        next(State::Settled, &failed, &facts()),
        pause(State::Settled, "HTTP 403")
    );
    let sent = Facts {
        create_sent_at: Some(NOW - 900),
        ..late
    };
    assert_eq!(
        next(State::Creating, &failed, &sent),
        pause(State::Creating, "HTTP 403")
    );
}

/// Every state, every event, every combination of the deciding facts.
fn sweep() -> Vec<(State, Event, Facts, Step)> {
    let events = [
        Event::Resumed,
        Event::Verified(Verdict::Valid),
        Event::Verified(Verdict::Invalid("x".into())),
        Event::Verified(Verdict::Unknown),
        Event::Settled(Answer::Success("0x1".into())),
        Event::Settled(Answer::Pending(Some("0x2".into()))),
        Event::Settled(Answer::Pending(None)),
        Event::Settled(Answer::Failed("unexpected_settle_error".into())),
        Event::Settled(Answer::Lost),
        Event::Looked(Chain::Paid("0x1".into())),
        Event::Looked(Chain::Elsewhere("cancelled".into())),
        Event::Looked(Chain::Unused { final_: true }),
        Event::Looked(Chain::Unused { final_: false }),
        Event::Looked(Chain::Unknown("down".into())),
        Event::Searched(Search::Found(server())),
        Event::Searched(Search::Missing),
        Event::Searched(Search::Failed("403".into())),
        Event::Created(Create::Created(server())),
        Event::Created(Create::Refused("400".into())),
        Event::Created(Create::RateLimited),
        Event::Created(Create::Unclear),
        Event::Extended(Extension::Done),
        Event::Extended(Extension::Gone("deleted".into())),
        Event::Extended(Extension::Busy("moved".into())),
    ];
    let mut rows = Vec::new();
    for state in State::ALL {
        for event in &events {
            for bits in 0..256u32 {
                let bit = |i: u32| bits & (1 << i) != 0;
                let f = Facts {
                    now: if bit(0) { NOW + 400 } else { NOW },
                    create_sent_at: bit(1).then_some(NOW - if bit(2) { 600 } else { 10 }),
                    creates: (if bit(3) { 3 } else { 1 }, 3),
                    settle_calls: if bit(4) { SETTLE_CALLS } else { 0 },
                    room: !bit(5),
                    answered: bit(6),
                    provider_room: !bit(7),
                    ..facts()
                };
                for renewal in [false, true] {
                    let f = Facts {
                        renewal,
                        ..f.clone()
                    };
                    rows.push((state, event.clone(), f.clone(), next(state, event, &f)));
                }
            }
        }
    }
    rows
}

#[test]
fn the_whole_table_keeps_the_money_rules() {
    let rows = sweep();
    assert_eq!(rows.len(), State::ALL.len() * 24 * 256 * 2);
    for (state, event, f, step) in rows {
        let row = format!("{state} on {event:?} with {f:?} → {step:?}");
        // Final states stay final.
        if !state.in_flight() {
            assert_eq!(step, stay(state, Effect::Finish), "{row}");
        }
        // Nothing paid is ever written without the chain's evidence: a facilitator's success
        // is not it.
        if matches!(step.write, Write::Settled(_)) {
            assert!(matches!(event, Event::Looked(Chain::Paid(_))), "{row}");
        }
        // Once a settle may have been sent, only evidence ends the order without a charge.
        if state == State::Settling && matches!(step.to, State::Rejected | State::Expired) {
            assert!(
                matches!(
                    event,
                    Event::Looked(Chain::Elsewhere(_) | Chain::Unused { final_: true })
                ),
                "{row}"
            );
        }
        // A claim is refused only once the chain shows the authorization did not pay us: never
        // on the facilitator's word alone.
        if state == State::Claimed && step.to == State::Rejected {
            assert!(
                matches!(
                    event,
                    Event::Looked(Chain::Elsewhere(_) | Chain::Unused { .. })
                ),
                "{row}"
            );
        }
        // Nor does a claim expire before the chain shows it unused for good.
        if state == State::Claimed && step.to == State::Expired {
            assert_eq!(
                event,
                Event::Looked(Chain::Unused { final_: true }),
                "{row}"
            );
        }
        // A paid order never ends uncharged.
        if matches!(state, State::Settled | State::Creating) {
            assert!(
                !matches!(step.to, State::Rejected | State::Expired | State::Claimed),
                "{row}"
            );
        }
        // No create (and no credit) while a create may still land.
        let may_land = f
            .create_sent_at
            .is_some_and(|t| f.now < t + f.lease + f.create_settle);
        if may_land && !f.renewal && state.in_flight() {
            assert_ne!(step.effect, Effect::Create, "{row}");
            if matches!(event, Event::Searched(_)) {
                assert_ne!(step.to, State::Credited, "{row}");
            }
        }
        // Every outside call needs time.
        if matches!(
            step.effect,
            Effect::Verify | Effect::Settle | Effect::LookUp
        ) {
            assert!(f.room, "{row}");
        }
        if matches!(
            step.effect,
            Effect::Create | Effect::Search | Effect::Extend
        ) {
            assert!(f.provider_room, "{row}");
        }
        // A settle that answered is not asked again by the same attempt.
        if f.answered {
            assert_ne!(step.effect, Effect::Settle, "{row}");
        }
        // A settle is never sent in or after the authorization's last seconds.
        if step.effect == Effect::Settle {
            assert!(f.now + SETTLE_BUFFER_SECS < f.valid_before, "{row}");
            assert!(f.settle_calls < SETTLE_CALLS, "{row}");
        }
        // A create always goes with its intent.
        if step.effect == Effect::Create {
            assert_eq!(step.write, Write::Creating, "{row}");
        }
        // Deciding again never loops.
        if event == Event::Resumed {
            assert_ne!(step.effect, Effect::Continue, "{row}");
        }
    }
}
