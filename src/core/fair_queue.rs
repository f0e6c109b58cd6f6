//! A bounded queue shared fairly between namespaces (issue #43 §1: "the shared queues …
//! shared fairly between namespaces, so one namespace cannot starve the others").
//!
//! - **Taken in turn**: [`FairQueue::pop`] serves the namespaces round-robin, each in its
//!   own arrival order, so a namespace with a thousand queued items delays another's next
//!   item by at most one item per busy namespace, not by a thousand.
//! - **Full**: the oldest item of the namespace holding the most is dropped to make room,
//!   so a flood from one namespace pushes out its own items, never a quiet namespace's.
//!
//! Used by the Event queue (`k8s/events.rs`) and each webhook's notification queue
//! (`outbound/notify/sender.rs`).

use std::collections::{BTreeMap, VecDeque};

#[derive(Debug)]
pub struct FairQueue<T> {
    queues: BTreeMap<String, VecDeque<T>>,
    len: usize,
    capacity: usize,
    /// The namespace served last; the next turn goes to the one after it.
    served: Option<String>,
}

impl<T> FairQueue<T> {
    /// A queue of at most `capacity` items (at least one).
    pub fn new(capacity: usize) -> Self {
        Self {
            queues: BTreeMap::new(),
            len: 0,
            capacity: capacity.max(1),
            served: None,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Queues `item` for `namespace`. When the queue is full, the oldest item of the
    /// namespace that holds the most (the first by name among equals) is dropped and returned.
    pub fn push(&mut self, namespace: &str, item: T) -> Option<(String, T)> {
        let dropped = if self.len >= self.capacity {
            self.drop_from_largest()
        } else {
            None
        };
        match self.queues.get_mut(namespace) {
            Some(q) => q.push_back(item),
            None => {
                self.queues
                    .insert(namespace.to_owned(), VecDeque::from([item]));
            }
        }
        self.len += 1;
        dropped
    }

    /// The next item: the namespaces take turns.
    pub fn pop(&mut self) -> Option<(String, T)> {
        let namespace = match &self.served {
            Some(last) => self
                .queues
                .range::<str, _>((
                    std::ops::Bound::Excluded(last.as_str()),
                    std::ops::Bound::Unbounded,
                ))
                .next()
                .or_else(|| self.queues.iter().next()),
            None => self.queues.iter().next(),
        }?
        .0
        .clone();
        let item = self.take_front(&namespace)?;
        self.served = Some(namespace.clone());
        Some((namespace, item))
    }

    fn drop_from_largest(&mut self) -> Option<(String, T)> {
        // max_by_key keeps the last of equals; iterate in reverse for the first by name.
        let namespace = self
            .queues
            .iter()
            .rev()
            .max_by_key(|(_, q)| q.len())?
            .0
            .clone();
        let item = self.take_front(&namespace)?;
        Some((namespace, item))
    }

    fn take_front(&mut self, namespace: &str) -> Option<T> {
        let q = self.queues.get_mut(namespace)?;
        let item = q.pop_front()?;
        if q.is_empty() {
            self.queues.remove(namespace);
        }
        self.len -= 1;
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &mut FairQueue<u32>) -> Vec<(String, u32)> {
        std::iter::from_fn(|| q.pop()).collect()
    }

    #[test]
    fn namespaces_take_turns_each_in_its_own_order() {
        let mut q = FairQueue::new(100);
        for i in 0..5 {
            q.push("flood", i);
        }
        q.push("quiet", 100);
        q.push("other", 200);
        q.push("other", 201);
        let order: Vec<_> = drain(&mut q)
            .into_iter()
            .map(|(ns, i)| format!("{ns}:{i}"))
            .collect();
        assert_eq!(
            order,
            [
                "flood:0",
                "other:200",
                "quiet:100",
                "flood:1",
                "other:201",
                "flood:2",
                "flood:3",
                "flood:4"
            ]
        );
        assert!(q.is_empty());
    }

    #[test]
    fn a_full_queue_drops_the_oldest_of_the_namespace_holding_the_most() {
        let mut q = FairQueue::new(4);
        assert_eq!(q.push("quiet", 1), None);
        for i in 10..13 {
            assert_eq!(q.push("flood", i), None);
        }
        // Full: every further flood item pushes out the flood's own oldest.
        for i in 13..100 {
            let dropped = q.push("flood", i).expect("full");
            assert_eq!(dropped, ("flood".to_owned(), i - 3));
        }
        // A quiet namespace's item also makes room at the flood's expense.
        assert_eq!(q.push("late", 7), Some(("flood".to_owned(), 97)));
        assert_eq!(q.len(), 4);
        let mut left: Vec<_> = drain(&mut q);
        left.sort();
        assert_eq!(
            left,
            [
                ("flood".to_owned(), 98),
                ("flood".to_owned(), 99),
                ("late".to_owned(), 7),
                ("quiet".to_owned(), 1)
            ]
        );
    }

    #[test]
    fn equal_namespaces_lose_the_first_by_name_and_capacity_is_at_least_one() {
        let mut q = FairQueue::new(2);
        q.push("b", 1);
        q.push("a", 2);
        assert_eq!(q.push("c", 3), Some(("a".to_owned(), 2)));
        let mut one = FairQueue::new(0);
        assert_eq!(one.capacity(), 1);
        one.push("x", 1);
        assert_eq!(one.push("y", 2), Some(("x".to_owned(), 1)));
        assert_eq!(one.pop(), Some(("y".to_owned(), 2)));
        assert_eq!(one.pop(), None);
    }
}
