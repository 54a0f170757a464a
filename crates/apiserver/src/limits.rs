//! kube-apiserver's request limits: at most `--max-requests-inflight` read-only and
//! `--max-mutating-requests-inflight` mutating requests at once (429 with `Retry-After`
//! beyond), `--request-timeout` for everything that is not long-running (504), and
//! `--max-watches-per-user` open watches per user.
//!
//! Long-running requests (watches, console and VNC websockets, port forwards, uploads)
//! are not counted in flight, as upstream. Members of `system:masters` (the admin and
//! the server's own controllers and agents) are never refused: they take a slot when
//! one is free and go ahead without one when none is, as kube's max-in-flight filter
//! does, so the control plane never starves.
//!
//! Unlike upstream's plain max-in-flight (and like the idea of its Priority and
//! Fairness), one user cannot take a whole budget: a user may hold at most an equal
//! share of it among the users holding slots, and never more than half, so that
//! under a flood from one user another user's requests still find a free slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use apimachinery::status::Status;

use crate::request::{RequestInfo, Target, Verb};
use access::authn::{UserInfo, MASTERS_GROUP};

/// kube-apiserver's defaults.
pub const DEFAULT_MAX_REQUESTS_INFLIGHT: usize = 400;
pub const DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT: usize = 200;
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Not an upstream flag: generous for kubectl and informers, a cap for a runaway client.
pub const DEFAULT_MAX_WATCHES_PER_USER: usize = 500;

/// The seconds a 429 asks the client to wait (upstream's constant).
const RETRY_AFTER_SECONDS: i32 = 1;

/// What the server allows; 0 for a count means no limit, as upstream.
#[derive(Clone, Debug)]
pub struct LimitsConfig {
    pub max_requests_inflight: usize,
    pub max_mutating_requests_inflight: usize,
    pub max_watches_per_user: usize,
    pub request_timeout: Duration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_requests_inflight: DEFAULT_MAX_REQUESTS_INFLIGHT,
            max_mutating_requests_inflight: DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
            max_watches_per_user: DEFAULT_MAX_WATCHES_PER_USER,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

pub struct Limits {
    read_only: Arc<Budget>,
    mutating: Arc<Budget>,
    watches: Arc<Budget>,
    pub request_timeout: Duration,
}

/// A held place in a budget, given back when dropped.
pub struct Slot {
    budget: Arc<Budget>,
    /// Whose share it counts against (`None`: an exempt user's, counted in the total only).
    user: Option<String>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.budget.lock();
        state.total = state.total.saturating_sub(1);
        if let Some(user) = &self.user {
            if let Some(count) = state.per_user.get_mut(user) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    state.per_user.remove(user);
                }
            }
        }
    }
}

/// How a budget is shared.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sharing {
    /// A total, fairly shared between users (the in-flight budgets).
    Fair,
    /// The same limit for each user, no total (watches).
    PerUser,
}

struct Budget {
    limit: usize,
    sharing: Sharing,
    state: Mutex<BudgetState>,
}

#[derive(Default)]
struct BudgetState {
    total: usize,
    /// Slots held by each non-exempt user (users holding none are absent).
    per_user: HashMap<String, usize>,
}

impl Budget {
    fn new(limit: usize, sharing: Sharing) -> Arc<Budget> {
        Arc::new(Budget {
            limit,
            sharing,
            state: Mutex::new(BudgetState::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, BudgetState> {
        // A panic elsewhere cannot leave the counts half-updated: every update is one step.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Ok(None)`: go ahead uncounted (no limit, or an exempt user over it);
    /// `Err(held)`: refused, the user holding `held` slots.
    fn acquire(self: &Arc<Self>, user: &UserInfo) -> Result<Option<Slot>, usize> {
        if self.limit == 0 {
            return Ok(None);
        }
        let exempt = user.in_group(MASTERS_GROUP);
        let mut state = self.lock();
        if exempt {
            if self.sharing == Sharing::PerUser || state.total >= self.limit {
                return Ok(None);
            }
            state.total += 1;
            return Ok(Some(Slot {
                budget: self.clone(),
                user: None,
            }));
        }
        let held = state.per_user.get(&user.name).copied().unwrap_or(0);
        let allowed = match self.sharing {
            Sharing::PerUser => held < self.limit,
            Sharing::Fair => {
                let others = state.per_user.len() - usize::from(held > 0);
                let share = self.limit.div_ceil((others + 1).max(2));
                state.total < self.limit && held < share
            }
        };
        if !allowed {
            return Err(held);
        }
        state.total += 1;
        *state.per_user.entry(user.name.clone()).or_insert(0) += 1;
        Ok(Some(Slot {
            budget: self.clone(),
            user: Some(user.name.clone()),
        }))
    }
}

impl Limits {
    pub fn new(config: &LimitsConfig) -> Limits {
        Limits {
            read_only: Budget::new(config.max_requests_inflight, Sharing::Fair),
            mutating: Budget::new(config.max_mutating_requests_inflight, Sharing::Fair),
            watches: Budget::new(config.max_watches_per_user, Sharing::PerUser),
            request_timeout: config.request_timeout,
        }
    }

    /// A place in flight for a request that is not long-running, or the 429.
    pub fn admit(&self, user: &UserInfo, info: &RequestInfo) -> Result<Option<Slot>, Status> {
        let budget = if mutating(&info.verb) {
            &self.mutating
        } else {
            &self.read_only
        };
        budget.acquire(user).map_err(|_| {
            Status::too_many_requests(
                "Too many requests, please try again later.",
                RETRY_AFTER_SECONDS,
            )
        })
    }

    /// A place for one more open watch of `user`, or the 429.
    pub fn admit_watch(&self, user: &UserInfo) -> Result<Option<Slot>, Status> {
        self.watches.acquire(user).map_err(|held| {
            Status::too_many_requests(
                format!(
                    "Too many requests: user {:?} already has {held} watches open, the most one user may (--max-watches-per-user); close one and try again",
                    user.name
                ),
                RETRY_AFTER_SECONDS,
            )
        })
    }
}

/// kube's max-in-flight filter: everything but get, list and watch mutates.
fn mutating(verb: &Verb) -> bool {
    !matches!(verb, Verb::Get | Verb::List | Verb::Watch)
}

/// Subresources whose connections last as long as the client keeps them (kube's
/// `attach`, `exec`, `log`, `portforward`, `proxy`, and KubeVirt's console, VNC and
/// USB redirection websockets).
const LONG_RUNNING_SUBRESOURCES: [&str; 8] = [
    "attach",
    "exec",
    "log",
    "portforward",
    "proxy",
    "console",
    "vnc",
    "usbredir",
];

/// kube's `BasicLongRunningRequestCheck`: watches and connections are not timed out
/// and not counted in flight.
pub fn is_long_running(info: &RequestInfo) -> bool {
    if info.verb == Verb::Watch {
        return true;
    }
    let Target::Resource(path) = &info.target else {
        return false;
    };
    path.subresource
        .as_deref()
        .and_then(|s| s.split('/').next())
        .is_some_and(|s| LONG_RUNNING_SUBRESOURCES.contains(&s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo::new(name, groups.iter().map(|g| g.to_string()).collect())
    }

    #[test]
    fn one_user_takes_at_most_half_and_others_still_get_in() {
        let budget = Budget::new(4, Sharing::Fair);
        let (alice, bob) = (user("alice", &[]), user("bob", &[]));
        let a1 = budget.acquire(&alice).expect("first");
        let _a2 = budget.acquire(&alice).expect("second");
        assert_eq!(
            budget.acquire(&alice).err(),
            Some(2),
            "a third is over half"
        );
        let _b1 = budget.acquire(&bob).expect("bob gets in beside alice");
        let _b2 = budget.acquire(&bob).expect("bob's share");
        assert!(budget.acquire(&bob).is_err(), "the budget is full");
        drop(a1);
        assert!(budget.acquire(&bob).is_err(), "bob holds his share");
        assert!(
            budget.acquire(&alice).is_ok(),
            "alice's freed slot is hers again"
        );
    }

    #[test]
    fn shares_shrink_as_more_users_hold_slots() {
        let budget = Budget::new(6, Sharing::Fair);
        let (a, b, c) = (user("a", &[]), user("b", &[]), user("c", &[]));
        let _a = budget.acquire(&a).expect("a");
        let _b = budget.acquire(&b).expect("b");
        let _b2 = budget.acquire(&b).expect("b2");
        // With three users holding slots, each may hold two.
        let _c = budget.acquire(&c).expect("c");
        assert!(budget.acquire(&b).is_err(), "b holds a third of six");
        assert!(budget.acquire(&a).is_ok());
    }

    #[test]
    fn masters_are_never_refused_and_count_while_there_is_room() {
        let budget = Budget::new(2, Sharing::Fair);
        let admin = user("admin", &[MASTERS_GROUP]);
        let s1 = budget.acquire(&admin).expect("admin");
        let s2 = budget.acquire(&admin).expect("admin");
        assert!(s1.is_some() && s2.is_some(), "counted while there was room");
        assert!(
            matches!(budget.acquire(&admin), Ok(None)),
            "over: goes ahead uncounted"
        );
        assert!(
            budget.acquire(&user("bob", &[])).is_err(),
            "the budget is full"
        );
        drop(s1);
        assert!(budget.acquire(&user("bob", &[])).is_ok());
    }

    #[test]
    fn a_zero_limit_is_no_limit() {
        let budget = Budget::new(0, Sharing::Fair);
        for _ in 0..10 {
            assert!(matches!(budget.acquire(&user("bob", &[])), Ok(None)));
        }
    }

    #[test]
    fn watches_are_counted_per_user() {
        let budget = Budget::new(2, Sharing::PerUser);
        let (alice, bob) = (user("alice", &[]), user("bob", &[]));
        let _w1 = budget.acquire(&alice).expect("1");
        let w2 = budget.acquire(&alice).expect("2");
        assert_eq!(budget.acquire(&alice).err(), Some(2));
        assert!(budget.acquire(&bob).is_ok(), "bob has his own two");
        drop(w2);
        assert!(
            budget.acquire(&alice).is_ok(),
            "a closed watch frees its place"
        );
        assert!(matches!(
            budget.acquire(&user("admin", &[MASTERS_GROUP])),
            Ok(None)
        ));
    }
}
