//! A sorted vector as a small map: the tracker's per-pod and per-object tables hold one or
//! two entries, and a `BTreeMap` of one entry allocates a whole B-tree leaf (eleven slots,
//! ≈ 0.3–0.6 KiB here) where this allocates the entry alone (docs/controller.md, "Memory").

use std::borrow::Borrow;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VecMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<K: Ord, V> VecMap<K, V> {
    fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: Borrow<Q>,
    {
        self.0.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    pub fn insert(&mut self, key: K, value: V) {
        match self.find(&key) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => {
                self.0.reserve_exact(1);
                self.0.insert(i, (key, value));
            }
        }
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
    {
        if let Ok(i) = self.find(key) {
            self.0.remove(i);
        }
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        self.0.retain(|(k, v)| keep(k, v));
    }

    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|(k, _)| k)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for VecMap<K, V> {
    /// From any order; a key given twice keeps its last value (as `BTreeMap` does).
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut v: Vec<(K, V)> = iter.into_iter().collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(K, V)> = Vec::with_capacity(v.len());
        for (k, val) in v {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = val,
                _ => out.push((k, val)),
            }
        }
        out.shrink_to_fit();
        Self(out)
    }
}

#[cfg(test)]
mod tests {
    use super::VecMap;

    #[test]
    fn it_is_a_sorted_map() {
        let mut m: VecMap<String, u32> = [
            ("b".to_owned(), 1),
            ("a".to_owned(), 2),
            ("b".to_owned(), 3),
        ]
        .into_iter()
        .collect();
        assert_eq!(m.keys().map(String::as_str).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(m.get("b"), Some(&3), "the last value of a repeated key");
        m.insert("c".into(), 4);
        m.insert("a".into(), 5);
        assert_eq!(
            m.iter().map(|(k, v)| (k.as_str(), *v)).collect::<Vec<_>>(),
            [("a", 5), ("b", 3), ("c", 4)]
        );
        m.remove("b");
        assert!(!m.contains_key("b") && m.contains_key("c"));
        m.retain(|_, v| *v > 4);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a"]);
        m.remove("a");
        assert!(m.is_empty());
    }
}
