//! A seeded scheduler of concurrent actors at store calls: each actor (a request, a reconciler
//! pass, the clock, the operator) runs alone until its next DynamoDB call (the HTTP connector of
//! the test's store asks [`Scheduler::point`]) or an explicit [`Scheduler::point`] between its
//! steps; there it parks, and once every live actor is parked the seed picks which goes next.
//! So the interleaving of the actors' store calls — the only place they meet — is the seed's,
//! and a seed replays it. An actor can be killed at its n-th point (a Lambda that dies there),
//! or have one piece of its work cut there ([`Scheduler::cut_after`]: a request whose handler
//! dies, the agent that sent it going on).
//!
//! Its outbound calls — the provider's, the facilitator's, the node's — are points too, once
//! [`Scheduler::gate_outbound_calls`] installed the gate: each goes when the seed picks it, and
//! an actor killed or cut there never sends it.
//!
//! Calls of one actor made side by side (the rate limiter's counts, the refresher's reads:
//! futures joined in its task) go one at a time ([`Scheduler::call`]), in the order they asked,
//! so that a seed replays to the same schedule. Work an actor spawns (a task of its own) and
//! calls made outside any actor pass freely.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

tokio::task_local! {
    /// The actor the current task runs for, and its schedule.
    static ACTOR: (usize, Arc<Scheduler>);
}

/// splitmix64: a schedule's only source of choice.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn draw(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.draw() % n }
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

#[derive(Debug)]
struct Board {
    rng: Rng,
    /// The actor that may run.
    holder: Option<usize>,
    /// Parked actors, with how many of their calls wait.
    parked: BTreeMap<usize, usize>,
    live: BTreeSet<usize>,
    /// Points passed, per actor.
    points: BTreeMap<usize, u64>,
    /// The point at which an actor dies.
    kill_at: BTreeMap<usize, u64>,
    killed: BTreeSet<usize>,
    /// The point at which an actor's current piece of work is cut, and the actors cut there.
    cut_at: BTreeMap<usize, u64>,
    cut: BTreeSet<usize>,
    /// Every choice made, in order.
    trace: Vec<usize>,
}

/// The scheduler of one run (see the module docs).
#[derive(Debug)]
pub struct Scheduler {
    board: Mutex<Board>,
    turn: Notify,
    /// Per actor: held by the call of it that is at its point or on the wire.
    calls: Mutex<BTreeMap<usize, Arc<tokio::sync::Mutex<()>>>>,
}

impl Scheduler {
    /// A scheduler choosing with `seed`.
    pub fn new(seed: u64) -> Arc<Self> {
        Arc::new(Scheduler {
            board: Mutex::new(Board {
                rng: Rng(seed ^ 0x5EED_5EED_5EED_5EED),
                holder: None,
                parked: BTreeMap::new(),
                live: BTreeSet::new(),
                points: BTreeMap::new(),
                kill_at: BTreeMap::new(),
                killed: BTreeSet::new(),
                cut_at: BTreeMap::new(),
                cut: BTreeSet::new(),
                trace: Vec::new(),
            }),
            turn: Notify::new(),
            calls: Mutex::new(BTreeMap::new()),
        })
    }

    /// A call of actor `id` (a store call): it waits for the actor's calls before it (joined
    /// futures of one task ask in a fixed order, and the lock is fair), then is a
    /// [`Scheduler::point`]. Hold the answer until the call is answered.
    pub async fn call(&self, id: usize) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self.calls.lock().unwrap().entry(id).or_default().clone();
        let held = lock.lock_owned().await;
        self.point(id).await;
        held
    }

    /// The actor the current task runs for, if any.
    pub fn current() -> Option<usize> {
        ACTOR.try_with(|(id, _)| *id).ok()
    }

    /// Makes every outbound call of this process (the provider, the facilitator, the node:
    /// `domain::outbound::send`) made by an actor a [`Scheduler::call`] of its schedule, its turn
    /// held until the answer; calls made outside any actor pass freely.
    pub fn gate_outbound_calls() {
        domain::outbound::install_gate(Box::new(|_| {
            let turn = ACTOR.try_with(|(id, sched)| (*id, sched.clone())).ok();
            Box::pin(async move {
                match turn {
                    Some((id, sched)) => Box::new(sched.call(id).await) as Box<dyn Any + Send>,
                    None => Box::new(()),
                }
            })
        }));
    }

    /// Actor `id` dies at its `point`-th point (it never returns from it).
    pub fn kill_at(&self, id: usize, point: u64) {
        self.board.lock().unwrap().kill_at.insert(id, point);
    }

    /// Actor `id`'s work in hand is cut at its `points`-th point from now (1: its next): that
    /// point never returns, and [`Scheduler::cut_off`] runs the work until then. The actor
    /// itself lives on.
    pub fn cut_after(&self, id: usize, points: u64) {
        let mut board = self.board.lock().unwrap();
        let passed = board.points.get(&id).copied().unwrap_or(0);
        board.cut_at.insert(id, passed + points);
    }

    /// Runs `work` of actor `id` unless it is cut ([`Scheduler::cut_after`]): its output, or
    /// `None` when it was dropped at the point where it was cut. A cut not reached by the time
    /// `work` is done is disarmed.
    pub async fn cut_off<T>(&self, id: usize, work: impl Future<Output = T>) -> Option<T> {
        let out = tokio::select! {
            biased;
            () = self.wait_until(|board| board.cut.remove(&id)) => None,
            out = work => Some(out),
        };
        self.board.lock().unwrap().cut_at.remove(&id);
        out
    }

    /// The choices made so far (the actor that went at each turn).
    pub fn trace(&self) -> Vec<usize> {
        self.board.lock().unwrap().trace.clone()
    }

    /// Runs `actors` side by side (in this task) under the schedule until each has finished or
    /// died; their outputs (`None` for one killed).
    pub async fn run<'a, T>(
        self: &Arc<Self>,
        actors: Vec<std::pin::Pin<Box<dyn Future<Output = T> + 'a>>>,
    ) -> Vec<Option<T>> {
        {
            let mut board = self.board.lock().unwrap();
            board.live = (0..actors.len()).collect();
        }
        let runs = actors.into_iter().enumerate().map(|(id, actor)| {
            let sched = self.clone();
            ACTOR.scope((id, sched.clone()), async move {
                let out = tokio::select! {
                    biased;
                    () = sched.wait_until(|board| board.killed.contains(&id)) => None,
                    out = async { sched.point(id).await; actor.await } => Some(out),
                };
                sched.exit(id);
                out
            })
        });
        futures::future::join_all(runs).await
    }

    /// A point of actor `id`: it parks, and goes on when the schedule picks it (never, once
    /// it is killed here).
    pub async fn point(&self, id: usize) {
        let dies = {
            let mut board = self.board.lock().unwrap();
            let n = {
                let n = board.points.entry(id).or_default();
                *n += 1;
                *n
            };
            if board.kill_at.get(&id) == Some(&n) {
                board.killed.insert(id);
                true
            } else if board.cut_at.get(&id) == Some(&n) {
                // The actor holds the turn still: it goes on once its cut work is dropped.
                board.cut_at.remove(&id);
                board.cut.insert(id);
                true
            } else {
                *board.parked.entry(id).or_default() += 1;
                if board.holder == Some(id) {
                    board.holder = None;
                }
                self.pick(&mut board);
                false
            }
        };
        if dies {
            // Its task drops this actor ([`Scheduler::run`]), or the work cut
            // ([`Scheduler::cut_off`]): the call is never sent.
            self.turn.notify_waiters();
            std::future::pending::<()>().await;
        }
        loop {
            let turn = self.turn.notified();
            tokio::pin!(turn);
            turn.as_mut().enable();
            {
                let mut board = self.board.lock().unwrap();
                if board.holder == Some(id) {
                    if let Some(n) = board.parked.get_mut(&id) {
                        *n -= 1;
                        if *n == 0 {
                            board.parked.remove(&id);
                        }
                    }
                    return;
                }
            }
            turn.await;
        }
    }

    /// Waits until `happened` holds of the board (an actor killed, its work cut), asked at every
    /// turn.
    async fn wait_until(&self, mut happened: impl FnMut(&mut Board) -> bool) {
        loop {
            let turn = self.turn.notified();
            tokio::pin!(turn);
            turn.as_mut().enable();
            if happened(&mut self.board.lock().unwrap()) {
                return;
            }
            turn.await;
        }
    }

    /// Actor `id` finished (or died): the schedule goes on without it.
    fn exit(&self, id: usize) {
        let mut board = self.board.lock().unwrap();
        board.live.remove(&id);
        board.parked.remove(&id);
        if board.holder == Some(id) {
            board.holder = None;
        }
        self.pick(&mut board);
    }

    /// Once every live actor is parked and none holds the turn, the seed picks one.
    fn pick(&self, board: &mut Board) {
        if board.holder.is_some() || board.parked.is_empty() {
            return;
        }
        let all_parked = board
            .live
            .iter()
            .all(|id| board.parked.contains_key(id) || board.killed.contains(id));
        if !all_parked {
            return;
        }
        let candidates: Vec<usize> = board.parked.keys().copied().collect();
        let at = board.rng.below(candidates.len() as u64) as usize;
        let chosen = candidates[at];
        board.holder = Some(chosen);
        board.trace.push(chosen);
        self.turn.notify_waiters();
    }
}
