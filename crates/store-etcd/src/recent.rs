//! The values this server last wrote or read, by key: a possibly stale copy that an update
//! may start from instead of reading the key from etcd first (kube-apiserver's
//! `GuaranteedUpdate` starts from its watch cache's copy the same way). The write's compare
//! of mod revisions catches a stale copy; see [`store::Store::recent`].

use std::collections::HashMap;
use std::sync::Mutex;

use store::KeyValue;

/// Keys kept in each of the two generations: an update follows the write or read before it
/// closely (a controller reacting to what it just saw), so a few thousand recent keys
/// catch nearly all of them without holding a copy of every stored object.
const GENERATION: usize = 4096;

/// Two generations: when the young one is full it becomes the old one and the old one is
/// dropped, so what was used within the last `GENERATION` insertions is always kept.
#[derive(Default)]
pub struct Recent {
    generations: Mutex<(HashMap<String, KeyValue>, HashMap<String, KeyValue>)>,
}

impl Recent {
    pub fn get(&self, key: &str) -> Option<KeyValue> {
        let generations = self.lock();
        let (young, old) = &*generations;
        young.get(key).or_else(|| old.get(key)).cloned()
    }

    /// Keeps `kv` unless a newer value of its key is kept already (answers of concurrent
    /// requests arrive in any order).
    pub fn keep(&self, kv: &KeyValue) {
        let mut generations = self.lock();
        let (young, old) = &mut *generations;
        let newer_kept = young
            .get(&kv.key)
            .or_else(|| old.get(&kv.key))
            .is_some_and(|kept| kept.mod_revision > kv.mod_revision);
        if newer_kept {
            return;
        }
        old.remove(&kv.key);
        if young.len() >= GENERATION {
            *old = std::mem::take(young);
        }
        young.insert(kv.key.clone(), kv.clone());
    }

    pub fn forget(&self, key: &str) {
        let mut generations = self.lock();
        generations.0.remove(key);
        generations.1.remove(key);
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, (HashMap<String, KeyValue>, HashMap<String, KeyValue>)> {
        self.generations.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn kv(key: &str, revision: i64) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Bytes::from(format!("{key}@{revision}")),
            create_revision: 1,
            mod_revision: revision,
        }
    }

    #[test]
    fn an_older_answer_does_not_replace_a_newer_value() {
        let recent = Recent::default();
        recent.keep(&kv("a", 5));
        recent.keep(&kv("a", 3));
        assert_eq!(recent.get("a").map(|kv| kv.mod_revision), Some(5));
        recent.keep(&kv("a", 7));
        assert_eq!(recent.get("a").map(|kv| kv.mod_revision), Some(7));
        recent.forget("a");
        assert_eq!(recent.get("a"), None);
    }

    #[test]
    fn it_keeps_the_last_generation_of_keys_and_no_more_than_two() {
        let recent = Recent::default();
        for i in 0..3 * GENERATION {
            recent.keep(&kv(&format!("k{i}"), i as i64 + 1));
        }
        // The last GENERATION keys are kept, the first GENERATION are gone.
        for i in 2 * GENERATION..3 * GENERATION {
            assert!(recent.get(&format!("k{i}")).is_some(), "k{i} was dropped");
        }
        for i in 0..GENERATION {
            assert!(recent.get(&format!("k{i}")).is_none(), "k{i} was kept");
        }
        let generations = recent.lock();
        assert!(generations.0.len() + generations.1.len() <= 2 * GENERATION);
    }

    #[test]
    fn a_key_used_again_moves_to_the_young_generation() {
        let recent = Recent::default();
        recent.keep(&kv("hot", 1));
        for i in 0..GENERATION {
            recent.keep(&kv(&format!("k{i}"), i as i64 + 2));
        }
        // "hot" is in the old generation now; keeping it again saves it from the next turn.
        recent.keep(&kv("hot", 10_000));
        for i in 0..GENERATION {
            recent.keep(&kv(&format!("j{i}"), 20_000 + i as i64));
        }
        assert_eq!(recent.get("hot").map(|kv| kv.mod_revision), Some(10_000));
    }
}
