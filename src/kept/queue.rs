//! The responses not yet written, in memory: a bounded queue of those waiting for the writer,
//! and an index by id of those waiting and those being written, which lookups read. Plain data
//! behind the keeper's lock: every operation is O(1) but `remove` (a scan of the waiting
//! queue, which is bounded).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::store::StoredResponse;

/// How much may wait for the writer: about a minute of a busy gateway's answers, and little
/// enough memory for a small machine. Whichever is reached first bounds the queue.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub responses: usize,
    pub bytes: usize,
}

/// What became of a response given to [`Queue::push`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pushed {
    /// Queued; `evicted` older waiting responses were dropped to make room.
    Queued { evicted: u64 },
    /// Its id is waiting or being written already (the first one wins, as in the store).
    Duplicate,
    /// Larger than the whole queue may hold: dropped.
    TooLarge,
    /// The writer has drained the queue for the last time: dropped.
    Closed,
}

/// What [`Queue::remove`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Removed {
    /// No response of this workspace by this id is unwritten.
    Nothing,
    /// It was waiting: it will never be written.
    Waiting,
    /// It is being written: it is deleted from the store once written.
    InFlight,
}

#[derive(Debug)]
pub(super) struct Queue {
    limits: Limits,
    /// Waiting for the writer, oldest first.
    waiting: VecDeque<Arc<StoredResponse>>,
    /// [`size`] of the waiting responses together.
    waiting_bytes: usize,
    /// Every response waiting or being written, by id.
    by_id: HashMap<String, Arc<StoredResponse>>,
    /// Responses deleted while they were being written.
    deleted_in_flight: HashSet<String>,
    closed: bool,
}

/// The memory a response holds, near enough: its texts, and a little for the rest.
pub(super) fn size(r: &StoredResponse) -> usize {
    let key = r.key_id.as_ref().map_or(0, String::len);
    [
        r.id.len(),
        r.workspace_id.len(),
        key,
        r.model.len(),
        r.items.len(),
        r.response.len(),
        128,
    ]
    .into_iter()
    .fold(0, usize::saturating_add)
}

impl Queue {
    pub(super) fn new(limits: Limits) -> Self {
        Queue {
            limits,
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            by_id: HashMap::new(),
            deleted_in_flight: HashSet::new(),
            closed: false,
        }
    }

    /// Queues `r`, dropping the oldest waiting responses while the queue is full. The oldest
    /// go first: a conversation continues from its newest answer, which holds every earlier
    /// turn, so an old answer is the least likely to be asked for.
    pub(super) fn push(&mut self, r: Arc<StoredResponse>) -> Pushed {
        if self.closed {
            return Pushed::Closed;
        }
        if self.by_id.contains_key(&r.id) {
            return Pushed::Duplicate;
        }
        let bytes = size(&r);
        if bytes > self.limits.bytes {
            return Pushed::TooLarge;
        }
        self.by_id.insert(r.id.clone(), Arc::clone(&r));
        self.waiting.push_back(r);
        self.waiting_bytes = self.waiting_bytes.saturating_add(bytes);
        Pushed::Queued {
            evicted: self.trim(),
        }
    }

    /// Drops the oldest waiting responses until the queue is within its limits; how many.
    fn trim(&mut self) -> u64 {
        let mut evicted = 0;
        while self.waiting.len() > self.limits.responses || self.waiting_bytes > self.limits.bytes {
            let Some(old) = self.waiting.pop_front() else {
                break;
            };
            self.waiting_bytes = self.waiting_bytes.saturating_sub(size(&old));
            self.forget(&old);
            evicted += 1;
        }
        evicted
    }

    /// Removes `r` from the index, unless the index holds another response by its id.
    fn forget(&mut self, r: &Arc<StoredResponse>) {
        if self.by_id.get(&r.id).is_some_and(|i| Arc::ptr_eq(i, r)) {
            self.by_id.remove(&r.id);
        }
    }

    /// The unwritten response `id`, of any workspace.
    pub(super) fn get(&self, id: &str) -> Option<Arc<StoredResponse>> {
        self.by_id.get(id).cloned()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Responses waiting for the writer.
    pub(super) fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The oldest waiting responses, up to `limits` (at least one when any waits), now in
    /// flight: still found by [`get`](Self::get) until [`written`](Self::written).
    pub(super) fn take(&mut self, limits: Limits) -> Vec<Arc<StoredResponse>> {
        let mut batch = Vec::new();
        let mut bytes = 0usize;
        while let Some(next) = self.waiting.front() {
            let more = bytes.saturating_add(size(next));
            if !batch.is_empty() && (batch.len() >= limits.responses || more > limits.bytes) {
                break;
            }
            bytes = more;
            self.waiting_bytes = self.waiting_bytes.saturating_sub(size(next));
            batch.extend(self.waiting.pop_front());
        }
        batch
    }

    /// `batch` is in the store now: it leaves memory. Returns those deleted while they were
    /// being written, to delete from the store now.
    pub(super) fn written(&mut self, batch: &[Arc<StoredResponse>]) -> Vec<Arc<StoredResponse>> {
        let mut deleted = Vec::new();
        for r in batch {
            self.forget(r);
            if self.deleted_in_flight.remove(&r.id) {
                deleted.push(Arc::clone(r));
            }
        }
        deleted
    }

    /// `batch` could not be written yet: it waits again, ahead of everything, to be tried
    /// first; a response deleted meanwhile is not. Returns how many old responses the queue's
    /// limits then dropped (those of the batch first, the oldest).
    pub(super) fn retry(&mut self, batch: Vec<Arc<StoredResponse>>) -> u64 {
        for r in batch.into_iter().rev() {
            if self.deleted_in_flight.remove(&r.id) {
                continue;
            }
            self.waiting_bytes = self.waiting_bytes.saturating_add(size(&r));
            self.waiting.push_front(r);
        }
        self.trim()
    }

    /// `r` will never be written (the database refuses it): it leaves memory.
    pub(super) fn refused(&mut self, r: &Arc<StoredResponse>) {
        self.forget(r);
        self.deleted_in_flight.remove(&r.id);
    }

    /// Removes the workspace's unwritten response `id`.
    pub(super) fn remove(&mut self, workspace_id: &str, id: &str) -> Removed {
        let Some(r) = self
            .by_id
            .get(id)
            .filter(|r| r.workspace_id == workspace_id)
        else {
            return Removed::Nothing;
        };
        let r = Arc::clone(r);
        self.by_id.remove(id);
        match self.waiting.iter().position(|w| Arc::ptr_eq(w, &r)) {
            Some(at) => {
                self.waiting.remove(at);
                self.waiting_bytes = self.waiting_bytes.saturating_sub(size(&r));
                Removed::Waiting
            }
            None => {
                self.deleted_in_flight.insert(r.id.clone());
                Removed::InFlight
            }
        }
    }

    /// No response is accepted from now on: what waits is written one last time.
    pub(super) fn close(&mut self) {
        self.closed = true;
    }

    /// Drops every response waiting; how many.
    pub(super) fn abandon(&mut self) -> u64 {
        self.waiting_bytes = 0;
        let left: Vec<_> = self.waiting.drain(..).collect();
        for r in &left {
            self.forget(r);
        }
        left.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn response(id: &str, workspace: &str, items: usize) -> Arc<StoredResponse> {
        let at = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        Arc::new(StoredResponse {
            id: id.into(),
            workspace_id: workspace.into(),
            key_id: None,
            model: "m".into(),
            created_at: at,
            expires_at: at,
            items: "x".repeat(items),
            response: "{}".into(),
        })
    }

    fn ids(batch: &[Arc<StoredResponse>]) -> Vec<&str> {
        batch.iter().map(|r| r.id.as_str()).collect()
    }

    const ROOMY: Limits = Limits {
        responses: 100,
        bytes: 1 << 20,
    };

    #[test]
    fn a_full_queue_drops_its_oldest_by_count_and_by_bytes() {
        let mut q = Queue::new(Limits {
            responses: 2,
            bytes: 1 << 20,
        });
        for id in ["a", "b"] {
            assert_eq!(q.push(response(id, "w", 1)), Pushed::Queued { evicted: 0 });
        }
        assert_eq!(q.push(response("c", "w", 1)), Pushed::Queued { evicted: 1 });
        assert!(q.get("a").is_none(), "the oldest is gone, index included");
        assert_eq!(ids(&q.take(ROOMY)), ["b", "c"]);

        let one = size(&response("a", "w", 1000));
        let mut q = Queue::new(Limits {
            responses: 100,
            bytes: 2 * one + 10,
        });
        for id in ["a", "b"] {
            q.push(response(id, "w", 1000));
        }
        assert_eq!(
            q.push(response("c", "w", 1000)),
            Pushed::Queued { evicted: 1 }
        );
        assert_eq!(q.push(response("d", "w", 1 << 20)), Pushed::TooLarge);
        assert_eq!(ids(&q.take(ROOMY)), ["b", "c"]);
    }

    #[test]
    fn the_first_of_an_id_wins_until_it_is_written() {
        let mut q = Queue::new(ROOMY);
        let first = response("a", "w", 1);
        q.push(Arc::clone(&first));
        assert_eq!(q.push(response("a", "w", 2)), Pushed::Duplicate);
        let batch = q.take(ROOMY);
        assert_eq!(
            q.push(response("a", "w", 2)),
            Pushed::Duplicate,
            "in flight"
        );
        assert!(Arc::ptr_eq(&q.get("a").unwrap(), &first));
        assert!(q.written(&batch).is_empty());
        assert!(q.get("a").is_none(), "written: the store answers now");
    }

    #[test]
    fn a_batch_is_bounded_but_never_empty() {
        let mut q = Queue::new(ROOMY);
        for (id, n) in [("a", 10), ("b", 10), ("c", 5000), ("d", 1)] {
            q.push(response(id, "w", n));
        }
        let small = Limits {
            responses: 10,
            bytes: 1000,
        };
        assert_eq!(ids(&q.take(small)), ["a", "b"]);
        assert_eq!(ids(&q.take(small)), ["c"], "alone, though over the bytes");
        assert_eq!(
            ids(&q.take(Limits {
                responses: 1,
                ..small
            })),
            ["d"]
        );
        assert!(q.take(small).is_empty() && q.is_empty());
        assert!(q.get("a").is_some(), "in flight: still found");
    }

    #[test]
    fn a_failed_batch_waits_first_and_the_limits_drop_it_first() {
        let mut q = Queue::new(Limits {
            responses: 3,
            bytes: 1 << 20,
        });
        for id in ["a", "b"] {
            q.push(response(id, "w", 1));
        }
        let batch = q.take(ROOMY);
        for id in ["c", "d"] {
            q.push(response(id, "w", 1));
        }
        assert_eq!(q.retry(batch), 1, "four waiting, three allowed");
        assert!(q.get("a").is_none());
        assert_eq!(ids(&q.take(ROOMY)), ["b", "c", "d"]);
    }

    #[test]
    fn removal_is_by_workspace_and_reaches_a_write_in_flight() {
        let mut q = Queue::new(ROOMY);
        for id in ["a", "b", "c"] {
            q.push(response(id, "w", 1));
        }
        assert_eq!(q.remove("other", "a"), Removed::Nothing);
        let batch = q.take(Limits {
            responses: 2,
            ..ROOMY
        });
        assert_eq!(q.remove("w", "c"), Removed::Waiting);
        assert_eq!(q.remove("w", "a"), Removed::InFlight);
        assert!(q.get("a").is_none() && q.get("c").is_none());
        assert_eq!(q.remove("w", "a"), Removed::Nothing, "once");
        assert!(q.is_empty());
        // A deleted response in flight is deleted from the store once written…
        assert_eq!(ids(&q.written(&batch)), ["a"]);
        // …and not tried again when its write fails.
        q.push(response("e", "w", 1));
        let batch = q.take(ROOMY);
        q.remove("w", "e");
        assert_eq!(q.retry(batch), 0);
        assert!(q.is_empty());
    }

    #[test]
    fn a_closed_queue_takes_nothing_more_and_can_be_abandoned() {
        let mut q = Queue::new(ROOMY);
        for id in ["a", "b"] {
            q.push(response(id, "w", 1));
        }
        q.close();
        assert_eq!(q.push(response("c", "w", 1)), Pushed::Closed);
        let batch = q.take(Limits {
            responses: 1,
            ..ROOMY
        });
        assert_eq!(q.abandon(), 1);
        assert!(q.is_empty() && q.get("b").is_none());
        assert!(q.get("a").is_some(), "in flight: found until written");
        q.refused(&batch[0]);
        assert!(q.get("a").is_none());
    }
}
