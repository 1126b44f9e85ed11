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

/// The header's comments: `//` and `/* */` text, in order.
fn comments() -> Vec<String> {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/fabriclib.h")).unwrap();
    let mut out = Vec::new();
    let mut rest = src.as_str();
    while let Some(i) = rest.find('/') {
        rest = &rest[i..];
        if let Some(r) = rest.strip_prefix("//") {
            let end = r.find('\n').unwrap_or(r.len());
            out.push(r[..end].to_string());
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("/*") {
            let end = r.find("*/").unwrap_or(r.len());
            out.push(r[..end].to_string());
            rest = &r[end..];
        } else {
            rest = &rest[1..];
        }
    }
    out
}

/// `FABRICLIB_*` words in `text`; a family written `FABRICLIB_PEER_*` keeps its `_*`.
fn fabriclib_words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("FABRICLIB_") {
        let w: String = rest[i..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_' || *c == '*')
            .collect();
        rest = &rest[i + w.len()..];
        let w = w.trim_end_matches(|c| c == '_' && !w.ends_with("_*")).to_string();
        out.push(w);
    }
    out
}

/// The environment variables the header's comments name (not C names):
/// each must be one the library reads.
const ENVIRONMENT: [&str; 3] = ["FABRICLIB_BIND_ADDR", "FABRICLIB_DEVICE_MEMORY", "FABRICLIB_PROVIDER"];

/// (object-like macros, function-like macros, enumerators) of the header.
fn defined() -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut objects, mut functions, mut enumerators) = (Vec::new(), Vec::new(), Vec::new());
    for line in code().lines() {
        let t = line.trim_start();
        if let Some(d) = t.strip_prefix("#define ") {
            let name: String = d.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let list = if d[name.len()..].starts_with('(') { &mut functions } else { &mut objects };
            if !list.contains(&name) {
                list.push(name);
            }
        } else if t.starts_with("FABRICLIB_") && t.contains('=') {
            enumerators.push(t.split([' ', '=']).next().unwrap().to_string());
        }
    }
    (objects, functions, enumerators)
}

/// A name a comment mentions is defined (`FABRICLIB_PEER_*`: some name starts
/// with `FABRICLIB_PEER_`), or is an environment variable the library reads.
/// And every `pub const FABRICLIB_*` of `src/capi/` reaches the header
/// (cbindgen silently leaves out constants it cannot evaluate).
#[test]
fn every_name_the_header_mentions_is_defined() {
    let (objects, functions, enumerators) = defined();
    let all: Vec<&String> = objects.iter().chain(&functions).chain(&enumerators).collect();
    let config = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/config.rs")).unwrap();
    let mut missing = Vec::new();
    for w in comments().iter().flat_map(|c| fabriclib_words(c)) {
        let ok = match w.strip_suffix('*') {
            Some(family) => all.iter().any(|n| n.starts_with(family)),
            None if ENVIRONMENT.contains(&w.as_str()) => config.contains(&format!("\"{w}\"")),
            None => all.iter().any(|n| **n == w),
        };
        if !ok && !missing.contains(&w) {
            missing.push(w);
        }
    }
    let capi = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src/capi"));
    for f in std::fs::read_dir(capi).unwrap() {
        for line in std::fs::read_to_string(f.unwrap().path()).unwrap().lines() {
            if let Some(rest) = line.strip_prefix("pub const FABRICLIB_") {
                let name = format!("FABRICLIB_{}", rest.split(':').next().unwrap());
                if !objects.contains(&name) && !missing.contains(&name) {
                    missing.push(name);
                }
            }
        }
    }
    assert!(missing.is_empty(), "documented or declared but not defined in the header: {missing:?}");
    assert!(comments().iter().any(|c| fabriclib_words(c).iter().any(|w| w.ends_with('*'))), "no family seen");
}

#[test]
fn the_scan_catches_a_documented_name_that_is_not_defined() {
    assert_eq!(
        fabriclib_words("see `FABRICLIB_NOPE` and FABRICLIB_PEER_* and FABRICLIB_X_"),
        ["FABRICLIB_NOPE", "FABRICLIB_PEER_*", "FABRICLIB_X"]
    );
}

/// Every macro of the header expanded, and every enumerator used, in one
/// translation unit compiled by gcc and clang as C99, C11, C23, C++11 and
/// C++20 with `-Wall -Wextra -Werror` (clang: `scripts/deps.sh` installs it).
#[test]
fn every_macro_expands_in_every_dialect() {
    let (objects, functions, enumerators) = defined();
    let mut body = String::new();
    for n in objects.iter().chain(&enumerators) {
        match n.as_str() {
            "FABRICLIB_H" | "FABRICLIB_NOEXCEPT" => {}
            "FABRICLIB_VERSION_STRING" => body.push_str(&format!("    sink += (long long)sizeof({n});\n")),
            _ => body.push_str(&format!("    sink += (long long)({n});\n")),
        }
    }
    for n in &functions {
        body.push_str(&format!("    sink += (long long)({n}(0, 3, 0));\n"));
    }
    let tu = format!(
        "#include \"fabriclib.h\"\n\
         static void done_cb(void *user_data, fabriclib_status status) FABRICLIB_NOEXCEPT {{ (void)user_data; (void)status; }}\n\
         int main(void) {{\n    long long sink = 0;\n    fabriclib_done_cb cb = done_cb;\n    (void)cb;\n{body}    return (int)(sink & 1);\n}}\n"
    );
    assert!(functions.len() >= 2 && objects.len() > 12 && enumerators.len() >= 33, "the scan found too little");
    let dir = std::env::temp_dir().join(format!("fabriclib-header-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, cpp) = (dir.join("all.c"), dir.join("all.cpp"));
    std::fs::write(&c, &tu).unwrap();
    std::fs::write(&cpp, &tu).unwrap();
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/include");
    let mut failed = Vec::new();
    for (cc, file, stds) in [
        ("gcc", &c, &["c99", "c11", "c2x"][..]),
        ("clang", &c, &["c99", "c11", "c2x"][..]),
        ("g++", &cpp, &["c++11", "c++20"][..]),
        ("clang++", &cpp, &["c++11", "c++20"][..]),
    ] {
        for std in stds {
            let out = std::process::Command::new(cc)
                .args([&format!("-std={std}"), "-Wall", "-Wextra", "-Werror", "-I", include, "-c", "-o"])
                .arg(dir.join("all.o"))
                .arg(file)
                .output()
                .unwrap_or_else(|e| panic!("{cc}: {e} (scripts/deps.sh installs gcc, g++ and clang)"));
            if !out.status.success() {
                failed.push(format!("{cc} -std={std}:\n{}", String::from_utf8_lossy(&out.stderr)));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failed.is_empty(), "the header does not compile:\n{}", failed.join("\n"));
}

/// Each function's contract, from the comment above its declaration:
/// (name, returns fabriclib_status, the "Returns:" paragraph, the "Blocks:"
/// paragraph).
fn contracts() -> Vec<(String, bool, Option<String>, Option<String>)> {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/fabriclib.h")).unwrap();
    let lines: Vec<&str> = src.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        // A declaration: `type name(` at the start of a line.
        if line.starts_with([' ', '/', '#', '*', '}', '\t']) || line.starts_with("typedef") {
            continue;
        }
        let Some(open) = line.find('(') else { continue };
        let name = line[..open].rsplit([' ', '*']).next().unwrap_or("").to_string();
        if !name.starts_with("fabriclib_")
            || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            continue;
        }
        // The comment block right above it.
        let mut k = i;
        while k > 0 && lines[k - 1].starts_with("//") {
            k -= 1;
        }
        let comment: Vec<&str> = lines[k..i].iter().map(|l| l.trim_start_matches('/').trim()).collect();
        let para = |head: &str| {
            let start = comment.iter().position(|l| l.starts_with(head))?;
            let mut text = comment[start][head.len()..].trim().to_string();
            for l in &comment[start + 1..] {
                if l.is_empty() || l.starts_with("Returns:") || l.starts_with("Blocks:") {
                    break;
                }
                text.push(' ');
                text.push_str(l);
            }
            Some(text)
        };
        out.push((name, line.starts_with("fabriclib_status "), para("Returns:"), para("Blocks:")));
    }
    out
}

/// The header is the contract: every function says what it returns and
/// whether it can block, and a status it names is a status.
#[test]
fn every_function_names_its_returns_and_whether_it_blocks() {
    let statuses: Vec<String> = fabriclib::Status::ALL.iter().map(|s| screaming(&format!("{s:?}"))).collect();
    let all = contracts();
    assert!(all.len() >= 70, "the scan found {} functions", all.len());
    let mut missing = Vec::new();
    for (name, status, returns, blocks) in &all {
        let (Some(returns), Some(blocks)) = (returns, blocks) else {
            missing.push(name.clone());
            continue;
        };
        assert!(!blocks.is_empty(), "{name}: an empty Blocks:");
        if *status {
            assert!(returns.starts_with("`OK`"), "{name}: Returns: starts with `OK`, not {returns:?}");
            for word in returns.split('`').skip(1).step_by(2) {
                if !word.starts_with("FABRICLIB_") && word.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                    assert!(statuses.contains(&word.to_string()), "{name}: `{word}` is not a status");
                }
            }
        }
    }
    assert!(missing.is_empty(), "functions without a Returns: and a Blocks: line: {missing:?}");
}

/// The reference the build renders from the header
/// (`scripts/header-reference.sh`, CMake's `fabriclib_reference`) has every
/// function, each with its declaration, its Returns: and its Blocks:.
#[test]
fn the_rendered_reference_has_every_function_and_its_contract() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new("sh")
        .arg(format!("{root}/scripts/header-reference.sh"))
        .arg(format!("{root}/include/fabriclib.h"))
        .output()
        .expect("sh runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let md = String::from_utf8(out.stdout).unwrap();
    for (name, ..) in contracts() {
        let heading = format!("\n### `{name}`\n");
        let at = md.find(&heading).unwrap_or_else(|| panic!("the reference has no section for {name}"));
        let section = &md[at + heading.len()..];
        let section = &section[..section.find("\n### ").unwrap_or(section.len())];
        assert!(section.contains(&format!("{name}(")), "{name}: no declaration");
        assert!(section.contains("**Returns:**") && section.contains("**Blocks:**"), "{name}: no contract");
    }
}
