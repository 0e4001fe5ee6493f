//! `--shard K/N`: a stable split of a run's tags among the N jobs of a pipeline matrix, so
//! that each job applies its share and no tag is applied by two (their digest maps are then
//! joined with `runner-patch join`).

use crate::select::error::Error;

/// Shard `index` of `total` (1-based, as GitLab's `CI_NODE_INDEX`/`CI_NODE_TOTAL` and Jest's
/// or Playwright's `--shard=K/N` count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub total: u64,
}

impl Shard {
    /// Reads `K/N` with 1 <= K <= N <= 1000.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let parts = text.split_once('/').and_then(|(k, n)| {
            Some((k.trim().parse::<u64>().ok()?, n.trim().parse::<u64>().ok()?))
        });
        match parts {
            Some((index, total)) if (1..=total).contains(&index) && total <= 1000 => {
                Ok(Shard { index, total })
            }
            _ => Err(Error::Request(format!(
                "--shard {text:?} is not K/N with 1 <= K <= N <= 1000 (e.g. 2/4)"
            ))),
        }
    }

    /// Whether `tag` falls in this shard: the first 8 bytes of the sha256 of the tag, read as a
    /// big-endian number, modulo N, plus one (`printf %s TAG | sha256sum | cut -c1-16`, as a
    /// hexadecimal number). It depends on the tag alone: the same on every machine, in every
    /// version, and whatever other tags a run holds, so shards that list the tags at different
    /// moments still never share one.
    pub fn holds(&self, tag: &str) -> bool {
        let digest = crate::digest::sha256(tag.as_bytes());
        let head = digest.strip_prefix("sha256:").and_then(|h| h.get(..16));
        let n = head
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .unwrap_or(0);
        n % self.total + 1 == self.index
    }

    /// The items of this shard (each named by its tag), in their order.
    pub fn select<T>(&self, items: Vec<T>, tag: impl Fn(&T) -> &str) -> Vec<T> {
        let all = items.len();
        let mine: Vec<T> = items.into_iter().filter(|t| self.holds(tag(t))).collect();
        let names: Vec<&str> = mine.iter().map(&tag).collect();
        tracing::info!(
            "--shard {}/{}: {} of the {all} tag(s){}{}",
            self.index,
            self.total,
            mine.len(),
            if mine.is_empty() { "" } else { ": " },
            names.join(", ")
        );
        mine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_split_tags_by_a_stable_hash_of_each() {
        // printf %s cuda12.9-vllm0.27.1 | sha256sum: 33393cba4b3853b9... (odd: shard 2 of 2)
        let two = |k| Shard { index: k, total: 2 };
        assert!(two(2).holds("cuda12.9-vllm0.27.1") && !two(1).holds("cuda12.9-vllm0.27.1"));
        // 90b239260a5fc5aa... (even: shard 1 of 2)
        assert!(two(1).holds("cuda13.0-vllm0.30.0"));
        let tags: Vec<String> = (0..100).map(|i| format!("cuda12.{i}-vllm0.27.1")).collect();
        let mut seen = 0;
        for k in 1..=3 {
            let s = Shard { index: k, total: 3 };
            let mine = s.select(tags.clone(), |t| t.as_str());
            assert!(!mine.is_empty());
            seen += mine.len();
        }
        assert_eq!(seen, tags.len(), "every tag in exactly one shard");
        assert_eq!(
            Shard::parse(" 2/4").ok(),
            Some(Shard { index: 2, total: 4 })
        );
        for bad in ["0/2", "3/2", "2", "a/b", "1/0", "1/1001"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }
}
