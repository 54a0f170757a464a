//! The two shapes every typed part of an object takes, as macros so that each is written
//! once: an *open struct* (the fields the code reads, by their JSON names, each optional,
//! and every other field kept in `other`) and a *string enum* (a closed set of names, for
//! phases).
//!
//! An open struct decodes in one pass. serde's `#[serde(flatten)]` would keep the unknown
//! fields too, but it buffers the whole object before it decodes a field, which on the
//! controllers' watches of 10,000 VMIs costs as much as the decoding itself. Modeled fields
//! are `Option`s so that an object read and written back is the object that was read: a
//! field a user left out stays out, and one the model does not know stays as written.

/// Declares an open struct: `field: Type = "jsonName"` for each modeled field (stored as
/// `Option<Type>`), and `other` for the rest.
#[macro_export]
macro_rules! open_struct {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$field_attr:meta])*
                $field:ident : $ty:ty = $json:literal
            ),* $(,)?
        }
    ) => {
        $(#[$attr])*
        #[derive(Clone, Debug, Default, PartialEq)]
        $vis struct $name {
            $( $(#[$field_attr])* pub $field: Option<$ty>, )*
            /// The fields this type does not model, as they were written.
            pub other: ::serde_json::Map<String, ::serde_json::Value>,
        }

        impl $name {
            /// Whether it holds no field at all (and is left out when written).
            #[allow(dead_code)]
            pub fn is_empty(&self) -> bool {
                $( self.$field.is_none() && )* self.other.is_empty()
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use ::serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(None)?;
                $(
                    if let Some(value) = &self.$field {
                        map.serialize_entry($json, value)?;
                    }
                )*
                for (key, value) in &self.other {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Fields;
                impl<'de> ::serde::de::Visitor<'de> for Fields {
                    type Value = $name;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter) -> ::std::fmt::Result {
                        f.write_str(concat!("an object (", stringify!($name), ")"))
                    }
                    fn visit_map<A: ::serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<$name, A::Error> {
                        let mut out = $name::default();
                        while let Some(key) = map.next_key::<::std::borrow::Cow<'de, str>>()? {
                            match key.as_ref() {
                                $( $json => out.$field = map.next_value()?, )*
                                _ => {
                                    let value = map.next_value()?;
                                    out.other.insert(key.into_owned(), value);
                                }
                            }
                        }
                        Ok(out)
                    }
                }
                deserializer.deserialize_map(Fields)
            }
        }
    };
}

/// Declares a string enum: `Variant = "Name"` for each value. The first variant is the
/// `Default`, and what any other string reads as: for sets that virtplane and KubeVirt
/// close (phases), where a value this build does not know has no meaning to keep.
#[macro_export]
macro_rules! string_enum {
    (
        $(#[$attr:meta])*
        $vis:vis enum $name:ident {
            $(#[$first_attr:meta])* $first:ident = $first_text:literal,
            $( $(#[$variant_attr:meta])* $variant:ident = $text:literal, )*
        }
    ) => {
        $(#[$attr])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            #[default]
            $(#[$first_attr])* $first,
            $( $(#[$variant_attr])* $variant, )*
        }

        impl $name {
            pub const ALL: &[$name] = &[$name::$first, $( $name::$variant, )*];

            /// The value named `text`; any other text is the first (default) value.
            pub fn parse(text: &str) -> $name {
                match text {
                    $( $text => $name::$variant, )*
                    _ => $name::$first,
                }
            }

            pub fn as_str(self) -> &'static str {
                match self {
                    $name::$first => $first_text,
                    $( $name::$variant => $text, )*
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <::std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                Ok($name::parse(&text))
            }
        }
    };
}

/// Serde for a type that is read leniently from its JSON by `from_value` (admission checked
/// the shape; what does not fit reads as unset) and keeps that JSON in `raw`, which is what
/// it writes back.
#[macro_export]
macro_rules! raw_backed {
    ($name:ident) => {
        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                ::serde::Serialize::serialize(&self.raw, serializer)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> Result<Self, D::Error> {
                let raw = <::serde_json::Value as ::serde::Deserialize>::deserialize(deserializer)?;
                Ok($name::from_value(&raw))
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    crate::open_struct! {
        /// A test part.
        pub struct Part {
            name: String = "name",
            count: i64 = "count",
            inner: Part2 = "inner",
        }
    }

    crate::open_struct! {
        pub struct Part2 {
            flag: bool = "flag",
        }
    }

    crate::string_enum! {
        pub enum Colour {
            Unset = "",
            Red = "Red",
            Blue = "Blue",
        }
    }

    #[test]
    fn an_open_struct_keeps_what_it_does_not_model() {
        let raw =
            json!({"name": "a", "unknown": {"x": [1, 2]}, "inner": {"flag": true, "more": 1}});
        let part: Part = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(part.name.as_deref(), Some("a"));
        assert_eq!(part.count, None);
        assert_eq!(part.inner.as_ref().and_then(|i| i.flag), Some(true));
        assert_eq!(part.other["unknown"], json!({"x": [1, 2]}));
        assert_eq!(serde_json::to_value(&part).unwrap(), raw);
        // From text too (keys borrowed from the input).
        let text = serde_json::to_string(&raw).unwrap();
        let again: Part = serde_json::from_str(&text).unwrap();
        assert_eq!(again, part);
    }

    #[test]
    fn a_null_field_reads_as_unset_and_a_wrong_type_is_an_error() {
        let part: Part = serde_json::from_value(json!({"name": null})).unwrap();
        assert!(part.is_empty());
        assert!(serde_json::from_value::<Part>(json!({"count": "many"})).is_err());
        assert!(serde_json::from_value::<Part>(json!([1])).is_err());
    }

    #[test]
    fn a_string_enum_reads_an_unknown_value_as_its_first() {
        for colour in Colour::ALL {
            assert_eq!(Colour::parse(colour.as_str()), *colour);
        }
        let green: Colour = serde_json::from_value(json!("Green")).unwrap();
        assert_eq!(green, Colour::Unset);
        assert_eq!(serde_json::to_value(Colour::Red).unwrap(), json!("Red"));
        assert_eq!(Colour::Blue.to_string(), "Blue");
        assert_eq!(Colour::default(), Colour::Unset);
    }
}
