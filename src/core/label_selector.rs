//! Label selectors as `kubectl -l` and the API server read them (pure: no kube types).
//!
//! The grammar follows apimachinery's `labels.Parse` (kubernetes/kubernetes,
//! staging/src/k8s.io/apimachinery/pkg/labels/selector.go: `Lexer.Lex`, `Parser.parse`,
//! `parseRequirement`, `parseValues`, `NewRequirement`): requirements separated by `,`, each
//! one of `key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (v1,v2)`, `key notin (v1,v2)`,
//! `key>n`, `key<n`; keys are qualified names (`validation.IsQualifiedName`), values label
//! values (`validation.IsValidLabelValue`); `in`/`notin` need at least one value, `>`/`<`
//! exactly one integer. A selector the API server would answer 400 to is refused here, at
//! startup, with one line.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    Exists(String),
    DoesNotExist(String),
    Equal(String, String),
    NotEqual(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed selector; empty selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

impl Requirement {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
            Requirement::Equal(k, v) => labels.get(k) == Some(v),
            Requirement::NotEqual(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::GreaterThan(k, n) => labels
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::LessThan(k, n) => labels
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

impl LabelSelector {
    /// Parses a selector string; the error is one line naming the problem.
    pub fn parse(s: &str) -> Result<Self, crate::core::invalid::Invalid> {
        let tokens = lex(s)?;
        Parser { tokens, pos: 0 }.selector()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// The first requirement the labels do not satisfy.
    pub fn first_mismatch(&self, labels: &BTreeMap<String, String>) -> Option<&Requirement> {
        self.requirements.iter().find(|r| !r.matches(labels))
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

fn join(vs: &BTreeSet<String>) -> String {
    vs.iter().cloned().collect::<Vec<_>>().join(",")
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Requirement::Exists(k) => write!(f, "{k}"),
            Requirement::DoesNotExist(k) => write!(f, "!{k}"),
            Requirement::Equal(k, v) => write!(f, "{k}={v}"),
            Requirement::NotEqual(k, v) => write!(f, "{k}!={v}"),
            Requirement::In(k, vs) => write!(f, "{k} in ({})", join(vs)),
            Requirement::NotIn(k, vs) => write!(f, "{k} notin ({})", join(vs)),
            Requirement::GreaterThan(k, n) => write!(f, "{k}>{n}"),
            Requirement::LessThan(k, n) => write!(f, "{k}<{n}"),
        }
    }
}

/// The canonical form, as sent to the API server.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.requirements.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
    In,
    NotIn,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Token::Ident(s) => return write!(f, "{s:?}"),
            Token::Not => "!",
            Token::Eq => "=",
            Token::DoubleEq => "==",
            Token::NotEq => "!=",
            Token::Gt => ">",
            Token::Lt => "<",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
            Token::In => "in",
            Token::NotIn => "notin",
        };
        write!(f, "{s:?}")
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | '>' | '<' | '(' | ')' | ',')
}

fn lex(s: &str) -> Result<Vec<Token>, crate::core::invalid::Invalid> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if is_special(c) {
            chars.next();
            let next_eq = chars.peek() == Some(&'=');
            let t = match c {
                '!' if next_eq => Token::NotEq,
                '!' => Token::Not,
                '=' if next_eq => Token::DoubleEq,
                '=' => Token::Eq,
                '>' => Token::Gt,
                '<' => Token::Lt,
                '(' => Token::Open,
                ')' => Token::Close,
                _ => Token::Comma,
            };
            if matches!(t, Token::NotEq | Token::DoubleEq) {
                chars.next();
            }
            out.push(t);
            continue;
        }
        let mut word = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || is_special(c) {
                break;
            }
            word.push(c);
            chars.next();
        }
        out.push(match word.as_str() {
            "in" => Token::In,
            "notin" => Token::NotIn,
            _ => Token::Ident(word),
        });
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn selector(mut self) -> Result<LabelSelector, crate::core::invalid::Invalid> {
        let mut requirements = Vec::new();
        if self.tokens.is_empty() {
            return Ok(LabelSelector::default());
        }
        loop {
            requirements.push(self.requirement()?);
            match self.next() {
                None => break,
                Some(Token::Comma) if self.peek().is_some() => continue,
                Some(Token::Comma) => return Err("ends with ',': a requirement is missing".into()),
                Some(t) => {
                    return Err(crate::invalid!(
                        "found {t} after a requirement, expected ','"
                    ))
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    fn requirement(&mut self) -> Result<Requirement, crate::core::invalid::Invalid> {
        if self.peek() == Some(&Token::Not) {
            self.next();
            let key = self.key()?;
            return Ok(Requirement::DoesNotExist(key));
        }
        let key = self.key()?;
        match self.peek() {
            None | Some(Token::Comma) => return Ok(Requirement::Exists(key)),
            _ => {}
        }
        let op = self.next().unwrap_or(Token::Comma);
        match op {
            Token::Eq | Token::DoubleEq => Ok(Requirement::Equal(key, self.single_value()?)),
            Token::NotEq => Ok(Requirement::NotEqual(key.clone(), self.single_value()?)),
            Token::In | Token::NotIn => {
                let values = self.value_set(&key, &op)?;
                if values.is_empty() {
                    return Err(crate::invalid!(
                        "{key} {}: 'in' and 'notin' need at least one value",
                        if op == Token::In { "in ()" } else { "notin ()" }
                    ));
                }
                Ok(if op == Token::In {
                    Requirement::In(key, values)
                } else {
                    Requirement::NotIn(key, values)
                })
            }
            Token::Gt | Token::Lt => {
                let v = self.single_value()?;
                let n: i64 = v
                    .parse()
                    .map_err(|_| format!("{key}: '>' and '<' need an integer, found {v:?}"))?;
                Ok(if op == Token::Gt {
                    Requirement::GreaterThan(key, n)
                } else {
                    Requirement::LessThan(key, n)
                })
            }
            t => Err(crate::invalid!(
                "found {t} after key {key:?}, expected an operator (=, ==, !=, in, notin, >, <) or ','"
            )),
        }
    }

    fn key(&mut self) -> Result<String, crate::core::invalid::Invalid> {
        match self.next() {
            Some(Token::Ident(k)) => {
                validate_key(&k)?;
                Ok(k)
            }
            Some(t) => Err(crate::invalid!("found {t}, expected a label key")),
            None => Err("unexpected end: expected a label key".into()),
        }
    }

    fn single_value(&mut self) -> Result<String, crate::core::invalid::Invalid> {
        match self.peek() {
            Some(Token::Ident(_)) => {
                let Some(Token::Ident(v)) = self.next() else {
                    unreachable!()
                };
                validate_value(&v)?;
                Ok(v)
            }
            // `key=` selects the empty value, as in apimachinery.
            None | Some(Token::Comma) => Ok(String::new()),
            Some(t) => Err(crate::invalid!("found {t}, expected a value")),
        }
    }

    fn value_set(
        &mut self,
        key: &str,
        op: &Token,
    ) -> Result<BTreeSet<String>, crate::core::invalid::Invalid> {
        match self.next() {
            Some(Token::Open) => {}
            Some(t) => return Err(crate::invalid!("{key} {op}: found {t}, expected '('")),
            None => return Err(crate::invalid!("{key} {op}: unexpected end, expected '('")),
        }
        let mut values = BTreeSet::new();
        loop {
            match self.next() {
                Some(Token::Close) if values.is_empty() => return Ok(values),
                Some(Token::Ident(v)) => {
                    validate_value(&v)?;
                    values.insert(v);
                }
                // An empty value between commas is the empty string.
                Some(Token::Comma) => {
                    values.insert(String::new());
                    continue;
                }
                Some(t) => {
                    return Err(crate::invalid!("{key} {op} (: found {t}, expected a value"))
                }
                None => return Err(crate::invalid!("{key} {op} (: missing ')'")),
            }
            match self.next() {
                Some(Token::Comma) => {}
                Some(Token::Close) => return Ok(values),
                Some(t) => {
                    return Err(crate::invalid!(
                        "{key} {op} (: found {t}, expected ',' or ')'"
                    ))
                }
                None => return Err(crate::invalid!("{key} {op} (: missing ')'")),
            }
        }
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters.
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(is_name_char)
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A DNS-1123 subdomain: lower-case alphanumerics, '-' and '.', at most 253 characters.
fn valid_prefix(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn validate_key(k: &str) -> Result<(), crate::core::invalid::Invalid> {
    let ok = match k.split_once('/') {
        Some((prefix, name)) => valid_prefix(prefix) && valid_name(name),
        None => valid_name(k),
    };
    if ok {
        Ok(())
    } else {
        Err(crate::invalid!("invalid label key {k:?}: a key is an optional DNS subdomain prefix and '/', then at most 63 characters [A-Za-z0-9._-] starting and ending alphanumeric"))
    }
}

fn validate_value(v: &str) -> Result<(), crate::core::invalid::Invalid> {
    if v.is_empty() || valid_name(v) {
        Ok(())
    } else {
        Err(crate::invalid!("invalid label value {v:?}: at most 63 characters [A-Za-z0-9._-], starting and ending alphanumeric"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_every_operator_and_matches_like_the_api_server() {
        let s = LabelSelector::parse(
            "app in (web, api),tier!=db,!legacy,env==prod,track,x notin (a),gen>2,n<10,e=",
        )
        .unwrap();
        assert_eq!(
            s.to_string(),
            "app in (api,web),tier!=db,!legacy,env=prod,track,x notin (a),gen>2,n<10,e="
        );
        let pod = labels(&[
            ("app", "web"),
            ("env", "prod"),
            ("track", "stable"),
            ("gen", "3"),
            ("n", "9"),
            ("e", ""),
        ]);
        assert!(s.matches(&pod));
        let mut other = pod.clone();
        other.insert("tier".into(), "db".into());
        assert_eq!(
            s.first_mismatch(&other).map(ToString::to_string),
            Some("tier!=db".into())
        );
        assert!(LabelSelector::parse("").unwrap().matches(&pod));
        assert!(LabelSelector::parse("example.com/team=a")
            .unwrap()
            .matches(&labels(&[("example.com/team", "a")])));
    }

    #[test]
    fn malformed_selectors_are_one_line_errors() {
        for bad in [
            "app in (",
            "app in ()",
            "app in (a b)",
            "app=(",
            "=web",
            "app=web,",
            "app=web tier=db",
            "gen>two",
            "app=-bad-",
            "Bad_Prefix.COM/x=1",
            "app notin",
        ] {
            let err = LabelSelector::parse(bad).expect_err(bad);
            assert!(!err.is_empty() && !err.contains('\n'), "{bad}: {err}");
        }
        assert!(LabelSelector::parse("app in (")
            .unwrap_err()
            .contains("missing ')'"));
    }
}
