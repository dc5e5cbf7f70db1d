//! Named fields of one JSON object, found in one pass without building the rest.
//!
//! A Codex rollout line is mostly text the observer never reads (model input, tool output,
//! encrypted reasoning); building it as a `serde_json::Value` tree copied every string of it.
//! [`object_fields`] keeps the wanted fields as borrowed raw JSON (last occurrence wins, as in
//! a parsed object) and skips every other value.
//!
//! What is checked of a skipped value: its JSON syntax and that its bytes are UTF-8 (it is
//! taken as raw JSON, which serde_json validates), at any nesting depth. What is not: number
//! range (`1e400`) and the pairing of `\u` surrogate escapes, which only decoding checks. A
//! line whose unread fields hold those is read for its record instead of being refused.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

/// The values of `wanted` in the JSON object `json` (None where absent), or `Ok(None)` when
/// `json` is valid JSON but not an object. `Err`: not JSON (serde_json's message).
pub fn object_fields<'a, const N: usize>(
    json: &'a [u8],
    wanted: [&'static str; N],
) -> Result<Option<[Option<&'a RawValue>; N]>, serde_json::Error> {
    fields_of(serde_json::Deserializer::from_slice(json), wanted)
}

/// [`object_fields`] of a raw value already taken (and so already checked as UTF-8): its
/// fields are not checked again.
pub fn raw_object_fields<'a, const N: usize>(
    raw: &'a RawValue,
    wanted: [&'static str; N],
) -> Result<Option<[Option<&'a RawValue>; N]>, serde_json::Error> {
    fields_of(serde_json::Deserializer::from_str(raw.get()), wanted)
}

fn fields_of<'a, R: serde_json::de::Read<'a>, const N: usize>(
    mut deserializer: serde_json::Deserializer<R>,
    wanted: [&'static str; N],
) -> Result<Option<[Option<&'a RawValue>; N]>, serde_json::Error> {
    let found = deserializer.deserialize_any(ObjectVisitor { wanted })?;
    deserializer.end()?;
    Ok(found)
}

/// A raw JSON value that is a string, decoded; `Ok(None)` for any other JSON type.
pub fn as_string(raw: Option<&RawValue>) -> Result<Option<String>, serde_json::Error> {
    match raw {
        Some(raw) if raw.get().starts_with('"') => serde_json::from_str(raw.get()).map(Some),
        _ => Ok(None),
    }
}

/// A raw JSON value that is an object (raw values carry no surrounding white space).
pub fn is_object(raw: &RawValue) -> bool {
    raw.get().starts_with('{')
}

/// A raw JSON value that is `null`.
pub fn is_null(raw: &RawValue) -> bool {
    raw.get() == "null"
}

struct ObjectVisitor<const N: usize> {
    wanted: [&'static str; N],
}

impl<'de, const N: usize> Visitor<'de> for ObjectVisitor<N> {
    type Value = Option<[Option<&'de RawValue>; N]>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = [None; N];
        while let Some(index) = map.next_key_seed(KeySeed { wanted: &self.wanted })? {
            let value: &'de RawValue = map.next_value()?;
            if let Some(index) = index {
                found[index] = Some(value);
            }
        }
        Ok(Some(found))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // Read to the end, so what follows an array is judged as for any value.
        while seq.next_element::<&'de RawValue>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A key, decoded (escapes included), as its index in `wanted`.
struct KeySeed<'w, const N: usize> {
    wanted: &'w [&'static str; N],
}

impl<'de, const N: usize> DeserializeSeed<'de> for KeySeed<'_, N> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de, const N: usize> Visitor<'de> for KeySeed<'_, N> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.wanted.iter().position(|w| *w == key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn fields<const N: usize>(json: &str, wanted: [&'static str; N]) -> Option<[Option<String>; N]> {
        object_fields(json.as_bytes(), wanted).unwrap().map(|found| found.map(|raw| raw.map(|r| r.get().to_string())))
    }

    #[test]
    fn wanted_fields_are_kept_raw_and_the_last_duplicate_wins() {
        let got = fields(r#"{"a":1,"type":"x","payload":{"k":[1,2]},"type":"y","z":null}"#, ["type", "payload", "missing"]);
        assert_eq!(got, Some([Some(r#""y""#.into()), Some(r#"{"k":[1,2]}"#.into()), None]));
        // An escaped key is the key it decodes to.
        assert_eq!(fields(r#"{"typ\u0065":"x"}"#, ["type"]), Some([Some(r#""x""#.into())]));
    }

    #[test]
    fn valid_json_that_is_not_an_object_is_none_and_invalid_json_is_an_error() {
        for json in ["[1,{\"a\":2}]", "\"s\"", "1", "-2", "1.5", "true", "null", " [ ] "] {
            assert_eq!(fields(json, ["a"]), None, "{json}");
        }
        for json in ["", "{", "[1,", "{\"a\":}", "{\"a\":1} x", "[1] 2", "{\"a\":\"\\q\"}", "{'a':1}"] {
            assert!(object_fields(json.as_bytes(), ["a"]).is_err(), "{json}");
        }
        assert!(object_fields(b"{\"a\":\"\xff\"}", ["b"]).is_err(), "a skipped value's UTF-8 is checked");
    }

    #[test]
    fn string_values_decode_and_other_types_are_not_strings() {
        let raw: Box<RawValue> = serde_json::from_str(r#""a\nb\u00e9""#).unwrap();
        assert_eq!(as_string(Some(&raw)).unwrap(), Some("a\nbé".to_string()));
        let number: Box<RawValue> = serde_json::from_str("12").unwrap();
        assert_eq!(as_string(Some(&number)).unwrap(), None);
        assert_eq!(as_string(None).unwrap(), None);
        let object: Box<RawValue> = serde_json::from_str(r#" {"a":1}"#).unwrap();
        assert!(is_object(&object) && !is_null(&object));
    }

    proptest::proptest! {
        // Against serde_json's own parse: the same verdict (object, other JSON, not JSON) and
        // the same wanted values, for any JSON serde_json writes.
        #[test]
        fn agrees_with_a_full_parse(value in json_value(3)) {
            let json = serde_json::to_string(&value).unwrap();
            let got = object_fields(json.as_bytes(), ["a", "type", "payload"]).unwrap();
            match &value {
                Value::Object(map) => {
                    let got = got.expect("an object");
                    for (i, key) in ["a", "type", "payload"].iter().enumerate() {
                        let raw = got[i].map(|r| serde_json::from_str::<Value>(r.get()).unwrap());
                        proptest::prop_assert_eq!(raw.as_ref(), map.get(*key));
                    }
                }
                _ => proptest::prop_assert!(got.is_none()),
            }
        }
    }

    fn json_value(depth: u32) -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[a-z\"\\\\\n é]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(depth, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(prop_oneof![Just("a".to_string()), Just("type".to_string()), Just("payload".to_string()), "[a-z]{1,3}"], inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
