//! [`Pairs`]: a small map of names to values (a run's grid values, its environment).

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A small map of names to values, kept as pairs sorted by name (each name once): one
/// allocation, where a `BTreeMap` of one entry takes a node of over 500 bytes and a
/// sweep of 100,000 runs held several per run. Reads and writes as a JSON object, in
/// name order, as the `BTreeMap` it replaces did.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pairs(Vec<(String, String)>);

impl Pairs {
    /// No pairs.
    pub fn new() -> Pairs {
        Pairs(Vec::new())
    }

    /// Set `name` to `value` (replacing its value, if it had one).
    pub fn insert(&mut self, name: String, value: String) {
        match self.0.binary_search_by(|(k, _)| k.as_str().cmp(&name)) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.0.insert(i, (name, value)),
        }
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&String> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// Whether `name` has a value.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The pairs, in name order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&String, &String)> + Clone {
        self.0.iter().map(|(k, v)| (k, v))
    }

    /// The names, in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &String> + Clone {
        self.0.iter().map(|(k, _)| k)
    }

    /// The values, in name order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &String> + Clone {
        self.0.iter().map(|(_, v)| v)
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// None at all?
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(String, String)> for Pairs {
    /// As a `BTreeMap` collects: a name given twice keeps its last value.
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Pairs {
        let mut v: Vec<(String, String)> = iter.into_iter().collect();
        // Stable: equal names stay in order, and the last of each is kept.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(String, String)> = Vec::with_capacity(v.len());
        for (k, val) in v {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = val,
                _ => out.push((k, val)),
            }
        }
        out.shrink_to_fit();
        Pairs(out)
    }
}

impl<const N: usize> From<[(String, String); N]> for Pairs {
    fn from(pairs: [(String, String); N]) -> Pairs {
        pairs.into_iter().collect()
    }
}

impl std::ops::Index<&str> for Pairs {
    type Output = String;
    /// The value of `name`; panics where it has none, as a `BTreeMap` does.
    fn index(&self, name: &str) -> &String {
        self.get(name)
            .unwrap_or_else(|| panic!("no value for {name:?}"))
    }
}

impl<'a> IntoIterator for &'a Pairs {
    type Item = (&'a String, &'a String);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, String)>,
        fn(&'a (String, String)) -> (&'a String, &'a String),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl Serialize for Pairs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Pairs, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pairs;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of names to strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Pairs, A::Error> {
                let mut v: Vec<(String, String)> =
                    Vec::with_capacity(a.size_hint().unwrap_or(0).min(64));
                while let Some((k, val)) = a.next_entry::<String, String>()? {
                    v.push((k, val));
                }
                Ok(v.into_iter().collect())
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn pairs_read_write_and_look_up_as_the_btreemap_did() {
        let input = [("lr", "0.1"), ("seed", "3"), ("bs", "64"), ("lr", "0.01")];
        let p: Pairs = input
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let b: BTreeMap<String, String> = input
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        assert_eq!(p.get("lr").map(String::as_str), Some("0.01"));
        assert_eq!(p.get("momentum"), None);
        assert_eq!(p.keys().cloned().collect::<Vec<_>>(), ["bs", "lr", "seed"]);
        assert_eq!(p.len(), 3);
        let back: Pairs = serde_json::from_str(r#"{"seed":"3","lr":"0.01","bs":"64"}"#).unwrap();
        assert_eq!(back, p);
        let mut q = Pairs::new();
        q.insert("seed".into(), "3".into());
        q.insert("bs".into(), "64".into());
        q.insert("lr".into(), "0.5".into());
        q.insert("lr".into(), "0.01".into());
        assert_eq!(q, p);
        assert!(serde_json::from_str::<Pairs>(r#"{"a":1}"#).is_err());
        assert!(Pairs::new().is_empty());
    }
}
