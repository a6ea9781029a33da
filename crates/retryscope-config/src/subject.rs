//! A job's NATS subject pattern, as the `subject` matcher key writes it:
//! tokens separated by `.`, each a literal, `*` (exactly one token) or, last
//! only, `>` (one or more tokens) — the wildcards NATS defines.

/// The longest subject pattern a file may write.
pub(crate) const MAX_SUBJECT_LEN: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    /// `*`: any one token.
    One,
    /// `>`: one or more tokens, the rest of the subject.
    Rest,
}

/// A checked subject pattern, tokenised once so that matching a job's
/// subject allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SubjectPattern {
    text: String,
    tokens: Vec<Token>,
}

/// How specific a subject pattern is: more literal tokens first, then a
/// pattern without `>` (its subjects have one length) over one with it, then
/// more tokens. Two patterns that could match one subject compare equal only
/// when they have as many literals, both end with `>` or neither does, and
/// as many tokens — the loader refuses that pair as ambiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct SubjectSpecificity {
    literals: usize,
    fixed_length: bool,
    tokens: usize,
}

impl SubjectPattern {
    /// Parses `text`; the error says what is wrong with it.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() || text.len() > MAX_SUBJECT_LEN {
            return Err(format!("a subject pattern is 1..={MAX_SUBJECT_LEN} bytes, got {}", text.len()));
        }
        let count = text.split('.').count();
        let mut tokens = Vec::with_capacity(count);
        for (i, token) in text.split('.').enumerate() {
            let t = match token {
                "" => {
                    return Err(format!("{text:?} has an empty token (a leading, trailing or doubled '.')"));
                }
                "*" => Token::One,
                ">" if i + 1 == count => Token::Rest,
                ">" => return Err(format!("in {text:?}, '>' may only be the last token")),
                t if t.contains(['*', '>']) => {
                    return Err(format!(
                        "in {text:?}, the wildcard in {t:?} must be a whole token ('*' one token, '>' the rest)"
                    ));
                }
                t if t.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) => {
                    return Err(format!("{text:?} holds whitespace or a control character"));
                }
                t => Token::Literal(t.to_owned()),
            };
            tokens.push(t);
        }
        Ok(Self { text: text.to_owned(), tokens })
    }

    /// The pattern as written.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `subject` matches: token by token, bounded by the pattern's
    /// length; allocates nothing.
    pub(crate) fn matches(&self, subject: &str) -> bool {
        let mut parts = subject.split('.');
        for token in &self.tokens {
            match token {
                Token::Rest => return parts.next().is_some_and(|p| !p.is_empty()),
                Token::One => {
                    if parts.next().is_none_or(str::is_empty) {
                        return false;
                    }
                }
                Token::Literal(l) => {
                    if parts.next() != Some(l.as_str()) {
                        return false;
                    }
                }
            }
        }
        parts.next().is_none()
    }

    /// Whether one subject could match both patterns, compared token by
    /// token: two literals must be equal, `*` agrees with any one token, `>`
    /// with whatever is left of the other (at least one token).
    pub(crate) fn overlaps(&self, other: &SubjectPattern) -> bool {
        let (a, b) = (&self.tokens, &other.tokens);
        for i in 0.. {
            match (a.get(i), b.get(i)) {
                (None, None) => return true,
                (Some(Token::Rest), Some(_)) | (Some(_), Some(Token::Rest)) => return true,
                (None, Some(_)) | (Some(_), None) => return false,
                (Some(Token::Literal(x)), Some(Token::Literal(y))) if x != y => return false,
                _ => {}
            }
        }
        // The loop returns by the end of the shorter pattern.
        false
    }

    pub(crate) fn specificity(&self) -> SubjectSpecificity {
        SubjectSpecificity {
            literals: self.tokens.iter().filter(|t| matches!(t, Token::Literal(_))).count(),
            fixed_length: !matches!(self.tokens.last(), Some(Token::Rest)),
            tokens: self.tokens.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> SubjectPattern {
        SubjectPattern::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn wildcards_match_as_nats_defines_them() {
        assert!(p("orders.*").matches("orders.created"));
        assert!(!p("orders.*").matches("orders"));
        assert!(!p("orders.*").matches("orders.created.eu"));
        assert!(p("orders.>").matches("orders.created.eu"));
        assert!(!p("orders.>").matches("orders"));
        assert!(p("*.created").matches("orders.created"));
        assert!(p("orders.created").matches("orders.created"));
        assert!(!p("orders.created").matches("Orders.created"), "subjects are case-sensitive");
        assert!(p(">").matches("a.b.c"));
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for bad in ["", "orders.", ".orders", "orders..x", "orders.>.x", "orders*", "or>ders", "a b", "a.\t"]
        {
            assert!(SubjectPattern::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(SubjectPattern::parse(&"a".repeat(MAX_SUBJECT_LEN + 1)).is_err());
    }

    #[test]
    fn overlap_is_decided_token_by_token() {
        assert!(p("orders.*").overlaps(&p("*.created")));
        assert!(p("orders.*").overlaps(&p("orders.>")));
        assert!(!p("orders.*").overlaps(&p("orders.*.*")));
        assert!(!p("orders.*").overlaps(&p("invoices.*")));
        assert!(!p("orders.>").overlaps(&p("orders")));
        assert!(p(">").overlaps(&p("a.b.c")));
        assert!(p("a.*.c").overlaps(&p("a.b.>")));
    }

    #[test]
    fn literals_count_most_then_a_fixed_length_then_tokens() {
        assert!(p("orders.created").specificity() > p("orders.*").specificity());
        assert!(p("orders.*").specificity() > p("orders.>").specificity());
        assert!(p("orders.*.*").specificity() > p("orders.*").specificity());
        assert!(p("a.b.>").specificity() > p("a.*.*").specificity());
        assert_eq!(p("orders.*").specificity(), p("*.created").specificity());
    }
}
