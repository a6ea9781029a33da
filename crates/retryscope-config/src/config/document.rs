//! Reading a configuration file and parsing it as TOML or JSON, keeping
//! where each value is written so that a refusal names its line.

use super::*;

/// Reads `path` through its name (a ConfigMap's `..data` symlink swap is
/// seen on the next read), at most [`MAX_FILE_BYTES`].
pub(crate) fn read(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let origin: Arc<str> = Arc::from(path.display().to_string());
    let io = |e: std::io::Error| {
        ConfigError::new(ConfigErrorKind::Io, "", format!("cannot read the file: {e}"))
            .with_source(e)
            .at(&origin, None)
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text).map_err(io)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::new(
            ConfigErrorKind::OutOfRange,
            "",
            format!("the file must be at most {MAX_FILE_BYTES} bytes"),
        )
        .at(&origin, None));
    }
    Ok(text)
}

/// The parsed document, kept to find where a refused value is written.
pub(super) enum Doc<'t> {
    Toml(toml::Spanned<toml::de::DeTable<'t>>),
    Json(serde_json::Value),
}

impl<'t> Doc<'t> {
    pub(super) fn parse(text: &'t str, format: Format, origin: &Arc<str>) -> Result<Self, ConfigError> {
        match format {
            Format::Toml => {
                toml::de::DeTable::parse(text).map(Doc::Toml).map_err(|e| toml_error(text, origin, e))
            }
            Format::Json => serde_json::from_str::<Unique>(text)
                .map(|Unique(value)| Doc::Json(value))
                .map_err(|e| json_error(origin, e)),
        }
    }

    /// Whether the file writes `path`.
    pub(super) fn has(&self, path: &[&str]) -> bool {
        match self {
            Doc::Toml(t) => toml_span(t, path).is_some(),
            Doc::Json(v) => path.iter().try_fold(v, |v, k| v.get(k)).is_some(),
        }
    }

    pub(super) fn location(&self, text: &str, path: &[&str]) -> Option<Location> {
        match self {
            Doc::Toml(t) => toml_span(t, path).map(|s| line_column(text, s.start)),
            Doc::Json(_) => None,
        }
    }
}

/// A JSON value whose objects name each key once. serde_json's own `Value`
/// keeps the last of two equal keys, so `"enabled": false, "enabled": true`
/// would lift a kill switch without a word, and a dependency written twice
/// would replace the first; TOML refuses both itself.
struct Unique(serde_json::Value);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!("duplicate key `{key}`")));
            }
            let Unique(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(serde_json::Value::Object(object))
    }
}

/// The byte range of the value at `path`, or of the deepest table on it.
fn toml_span(root: &toml::Spanned<toml::de::DeTable<'_>>, path: &[&str]) -> Option<std::ops::Range<usize>> {
    use toml::de::DeValue;
    let (first, rest) = path.split_first()?;
    let mut value = root.get_ref().iter().find(|(k, _)| k.get_ref() == first).map(|(_, v)| v)?;
    for key in rest {
        let DeValue::Table(t) = value.get_ref() else { return None };
        value = t.iter().find(|(k, _)| k.get_ref() == key).map(|(_, v)| v)?;
    }
    Some(value.span())
}

fn line_column(text: &str, offset: usize) -> Location {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    Location { line, column }
}

pub(super) fn toml_error(text: &str, origin: &Arc<str>, e: toml::de::Error) -> ConfigError {
    let location = e.span().map(|s| line_column(text, s.start));
    let message = e.message().trim_end().to_owned();
    ConfigError::new(ConfigErrorKind::Syntax, "", message).with_source(e).at(origin, location)
}

pub(super) fn json_error(origin: &Arc<str>, e: serde_json::Error) -> ConfigError {
    let location = (e.line() > 0).then(|| Location { line: e.line(), column: e.column() });
    let text = e.to_string();
    let message = match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    };
    ConfigError::new(ConfigErrorKind::Syntax, "", message).with_source(e).at(origin, location)
}
