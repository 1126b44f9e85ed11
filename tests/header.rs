//! The public header declares only prefixed names: every macro, type, tag,
//! enumerator and function starts with `FABRICLIB_` / `fabriclib_`, so no
//! name of a caller's own (`MAX_RECV_BUFFERS`, say) can clash with it.

/// The header without comments and string literals.
fn code() -> String {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/fabriclib.h")).unwrap();
    let (mut out, mut it) = (String::new(), src.chars().peekable());
    while let Some(c) = it.next() {
        match (c, it.peek()) {
            ('/', Some('/')) => {
                while it.next().is_some_and(|c| c != '\n') {}
                out.push('\n');
            }
            ('/', Some('*')) => {
                it.next();
                let mut prev = ' ';
                for c in it.by_ref() {
                    if prev == '*' && c == '/' {
                        break;
                    }
                    if c == '\n' {
                        out.push('\n'); // line numbers stay right
                    }
                    prev = c;
                }
                out.push(' ');
            }
            ('"', _) => {
                for c in it.by_ref() {
                    if c == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            _ => out.push(c),
        }
    }
    out
}

/// Identifiers and single punctuation characters, in order.
fn tokens(line: &str) -> Vec<String> {
    let mut t: Vec<String> = Vec::new();
    let mut word = String::new();
    for c in line.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
            continue;
        }
        if !word.is_empty() {
            t.push(std::mem::take(&mut word));
        }
        if !c.is_whitespace() {
            t.push(c.to_string());
        }
    }
    if !word.is_empty() {
        t.push(word);
    }
    t
}

fn prefixed(name: &str) -> bool {
    name.starts_with("fabriclib_") || name.starts_with("FABRICLIB_")
}

/// Every name the header declares (macros, typedefs, tags, enumerators,
/// functions), with its line.
fn declared() -> Vec<(usize, String)> {
    let mut names = Vec::new();
    let (mut depth, mut in_enum) = (0i32, false);
    let code = code();
    let mut all: Vec<(usize, String)> = Vec::new();
    // C++-only lines (`extern "C" {`, the C++ spelling of a typedef whose C
    // spelling follows under #else) are skipped.
    let mut cplusplus = false;
    for (n, line) in code.lines().enumerate() {
        let t = tokens(line);
        if t.first().is_some_and(|s| s == "#") {
            match t.get(1).map(String::as_str) {
                Some("define") => names.push((n + 1, t[2].clone())),
                Some("ifdef") => cplusplus = t.get(2).is_some_and(|s| s == "__cplusplus"),
                Some("else") | Some("endif") => cplusplus = false,
                _ => {}
            }
            continue;
        }
        if !cplusplus {
            all.extend(t.into_iter().map(|s| (n + 1, s)));
        }
    }
    for (i, (line, tok)) in all.iter().enumerate() {
        let next = all.get(i + 1).map(|(_, s)| s.as_str());
        let prev = i.checked_sub(1).map(|j| all[j].1.as_str());
        match tok.as_str() {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                in_enum &= depth > 0;
            }
            "struct" | "union" | "enum" => {
                if let Some(name) = next.filter(|s| *s != "{") {
                    names.push((*line, name.to_string()));
                }
                in_enum |= tok == "enum";
            }
            _ if tok.starts_with(|c: char| c.is_alphabetic() || c == '_') => {
                // A function (or function-pointer typedef) name: an identifier
                // followed by '(' outside of any braces, or `(*name)`.
                let called = next == Some("(") && depth == 0 && prev != Some("(");
                let fn_ptr = prev == Some("*") && i >= 2 && all[i - 2].1 == "(" && next == Some(")");
                // The last identifier of a typedef, or an enumerator.
                let typedef_end = next == Some(";") && depth == 0 && prev != Some("(");
                let enumerator = in_enum && depth > 0 && matches!(next, Some(",") | Some("=") | Some("}"));
                if called || fn_ptr || typedef_end || enumerator {
                    names.push((*line, tok.clone()));
                }
            }
            _ => {}
        }
    }
    names
}

#[test]
fn every_declared_name_is_prefixed() {
    let names = declared();
    // The parser sees what it must: a sample of every kind of declaration.
    for want in [
        "fabriclib_engine_create",
        "fabriclib_done_cb",
        "fabriclib_submit_opts",
        "FABRICLIB_STATUS_OK",
        "FABRICLIB_VERSION",
    ] {
        assert!(names.iter().any(|(_, n)| n == want), "the header scan missed {want}: the test tests nothing");
    }
    let keywords = ["void", "extern", "FABRICLIB_H", "__cplusplus"];
    let bad: Vec<String> = names
        .iter()
        .filter(|(_, n)| !prefixed(n) && !keywords.contains(&n.as_str()))
        .map(|(l, n)| format!("include/fabriclib.h:{l}: {n}"))
        .collect();
    assert!(bad.is_empty(), "unprefixed names in the public header:\n{}", bad.join("\n"));
}

#[test]
fn the_scan_catches_an_unprefixed_macro() {
    let t = tokens("#define MAX_RECV_BUFFERS 4096");
    assert_eq!(t[2], "MAX_RECV_BUFFERS");
    assert!(!prefixed(&t[2]));
}

/// `BufferTooSmall` -> `BUFFER_TOO_SMALL`.
fn screaming(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// The statuses are declared once (`Status` in src/error.rs); the header's
/// enum is generated from it. `Status::ALL` (what `fabriclib_status_str` and
/// `from_code` use) must list exactly those enumerators, in code order, and
/// the codes must run 0..N without a gap.
#[test]
fn the_status_enum_is_status_all_in_code_order() {
    let header: Vec<(String, i32)> = code()
        .lines()
        .filter_map(|l| {
            let (name, value) = l.trim().strip_suffix(',')?.split_once(" = ")?;
            name.starts_with("FABRICLIB_STATUS_").then(|| (name.to_string(), value.parse().unwrap()))
        })
        .collect();
    let rust: Vec<(String, i32)> = fabriclib::Status::ALL
        .iter()
        .map(|s| (format!("FABRICLIB_STATUS_{}", screaming(&format!("{s:?}"))), *s as i32))
        .collect();
    assert_eq!(header, rust);
    assert!(header.iter().enumerate().all(|(i, (_, code))| *code == i as i32), "codes with a gap: {header:?}");
    for s in fabriclib::Status::ALL {
        assert_eq!(fabriclib::Status::from_code(s as i32), Some(s));
    }
}
