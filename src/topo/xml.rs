//! hwloc 2's XML topology format, read into a tree of objects: what
//! `Topo::from_xml` and `Topo::system` (through hwloc's own export) map.
//! Only `<object>` elements become objects, every other element (`info`,
//! `distances2`, `page_type`…) is skipped with its content; attributes keep
//! their text, entities decoded.
use crate::error::{Error, Result, Status};

/// One `<object>`: its `type`, its attributes, and where it sits.
pub(super) struct Obj {
    pub ty: String,
    attrs: Vec<(String, String)>,
    pub parent: Option<usize>,
    pub children: Vec<usize>,
}

impl Obj {
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// A bitmap attribute (`cpuset`, `nodeset`) as its set indices; `None` if absent.
    pub fn bitmap(&self, name: &str) -> Option<Vec<u32>> {
        self.attr(name).map(bitmap)
    }
}

/// Objects in document order (index 0 is the root).
pub(super) struct Tree {
    pub objs: Vec<Obj>,
}

fn bad(what: impl std::fmt::Display) -> Error {
    Error::new(Status::InvalidArgument, format!("hwloc XML: {what}"))
}

impl Tree {
    pub fn parse(xml: &str) -> Result<Tree> {
        let mut objs: Vec<Obj> = Vec::new();
        // Open elements: the object each one is (None: not an object).
        let mut open: Vec<(String, Option<usize>)> = Vec::new();
        let mut rest = xml;
        while let Some(at) = rest.find('<') {
            rest = &rest[at..];
            let skip_to =
                |end: &str, rest: &str| rest.find(end).map(|i| i + end.len()).ok_or_else(|| bad(format!("no {end}")));
            if rest.starts_with("<?") {
                rest = &rest[skip_to("?>", rest)?..];
            } else if rest.starts_with("<!--") {
                rest = &rest[skip_to("-->", rest)?..];
            } else if rest.starts_with("<!") {
                rest = &rest[skip_to(">", rest)?..];
            } else if let Some(close) = rest.strip_prefix("</") {
                let end = close.find('>').ok_or_else(|| bad("unterminated end tag"))?;
                let name = close[..end].trim();
                match open.pop() {
                    Some((n, _)) if n == name => {}
                    other => return Err(bad(format!("</{name}> closes {:?}", other.map(|o| o.0)))),
                }
                rest = &close[end + 1..];
            } else {
                let (name, attrs, empty, after) = tag(&rest[1..])?;
                let parent = open.iter().rev().find_map(|(_, o)| *o);
                let me = (name == "object").then(|| {
                    let ty = attrs.iter().find(|(k, _)| k == "type").map(|(_, v)| v.clone()).unwrap_or_default();
                    objs.push(Obj { ty, attrs, parent, children: Vec::new() });
                    let me = objs.len() - 1;
                    if let Some(p) = parent {
                        objs[p].children.push(me);
                    }
                    me
                });
                if !empty {
                    open.push((name.to_string(), me));
                }
                rest = after;
            }
        }
        if let Some((n, _)) = open.last() {
            return Err(bad(format!("<{n}> is not closed")));
        }
        if objs.is_empty() {
            return Err(bad("no <object>"));
        }
        Ok(Tree { objs })
    }

    /// The objects of type `ty`, in document order.
    pub fn of_type<'a>(&'a self, ty: &'a str) -> impl Iterator<Item = (usize, &'a Obj)> + 'a {
        self.objs.iter().enumerate().filter(move |(_, o)| o.ty == ty)
    }

    /// The first ancestor with CPUs (hwloc's non-I/O ancestor).
    pub fn non_io_ancestor(&self, i: usize) -> Option<&Obj> {
        let mut p = self.objs[i].parent;
        while let Some(a) = p {
            if self.objs[a].attr("cpuset").is_some() {
                return Some(&self.objs[a]);
            }
            p = self.objs[a].parent;
        }
        None
    }

    /// The indices from the root down to `i`.
    pub fn path(&self, i: usize) -> Vec<u64> {
        let mut p = vec![i as u64];
        let mut at = self.objs[i].parent;
        while let Some(a) = at {
            p.push(a as u64);
            at = self.objs[a].parent;
        }
        p.reverse();
        p
    }
}

type Tag<'a> = (&'a str, Vec<(String, String)>, bool, &'a str);

/// A start tag after its `<`: its name, attributes, whether it is empty
/// (`/>`), and the text after it.
fn tag(s: &str) -> Result<Tag<'_>> {
    let name_end =
        s.find(|c: char| c.is_whitespace() || c == '>' || c == '/').ok_or_else(|| bad("unterminated tag"))?;
    let name = &s[..name_end];
    let mut rest = &s[name_end..];
    let mut attrs = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("/>") {
            return Ok((name, attrs, true, r));
        }
        if let Some(r) = rest.strip_prefix('>') {
            return Ok((name, attrs, false, r));
        }
        let eq = rest.find('=').ok_or_else(|| bad(format!("<{name}>: attribute without a value")))?;
        let key = rest[..eq].trim().to_string();
        let v = rest[eq + 1..].trim_start();
        let q = v
            .chars()
            .next()
            .filter(|c| *c == '"' || *c == '\'')
            .ok_or_else(|| bad(format!("<{name} {key}>: unquoted")))?;
        let end = v[1..].find(q).ok_or_else(|| bad(format!("<{name} {key}>: unterminated value")))?;
        attrs.push((key, unescape(&v[1..1 + end])));
        rest = &v[end + 2..];
    }
}

fn unescape(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out += &rest[..i];
        rest = &rest[i..];
        let Some(end) = rest.find(';') else { break };
        let ent = &rest[1..end];
        let c = match ent {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => ent
                .strip_prefix("#x")
                .map(|h| u32::from_str_radix(h, 16).ok())
                .unwrap_or_else(|| ent.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match c {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out + rest
}

/// hwloc's bitmap text: 32-bit hex words, most significant first, comma
/// separated (`0x00000001,0xffffffff`); an infinite leading `0xf...f` adds
/// nothing (no machine has CPUs there).
fn bitmap(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for (w, word) in s.rsplit(',').enumerate() {
        let Ok(v) = u32::from_str_radix(word.trim().trim_start_matches("0x"), 16) else { continue };
        out.extend((0..32).filter(|b| v >> b & 1 == 1).map(|b| w as u32 * 32 + b));
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_nest_and_other_elements_are_skipped() {
        let t = Tree::parse(
            r#"<?xml version="1.0"?><!DOCTYPE topology SYSTEM "hwloc2.dtd"><topology version="2.0">
<object type="Machine" cpuset="0x00000003,0x80000001"><info name="A" value="x &amp; &lt;y&gt; &#65;"/>
  <object type='PCIDev' pci_busid="0000:01:00.0"><object type="OSDev" name="mlx5_0" osdev_type="3"/></object>
  <distances2 type="NUMANode" nbobjs="1"><indexes length="1">0</indexes></distances2>
  <!-- a comment <object type="X"/> -->
</object></topology>"#,
        )
        .unwrap();
        assert_eq!(t.objs.len(), 3);
        assert_eq!(t.objs[0].bitmap("cpuset").unwrap(), vec![0, 31, 32, 33]);
        assert_eq!(t.objs[2].attr("name"), Some("mlx5_0"));
        assert_eq!((t.objs[2].parent, t.objs[1].parent), (Some(1), Some(0)));
        assert_eq!(t.path(2), vec![0, 1, 2]);
        assert_eq!(t.non_io_ancestor(2).unwrap().ty, "Machine");
        assert_eq!(unescape("x &amp; &lt;y&gt; &#65;&#x42; &bogus;"), "x & <y> AB &bogus;");
        assert_eq!(bitmap("0xf...f,0x00000100"), vec![8]);
    }

    #[test]
    fn malformed_xml_is_an_error_not_a_panic() {
        for bad in
            ["", "<topology>", "<object type=\"A\"></topology>", "<object type=A/>", "<object type=\"A", "<a><b></a>"]
        {
            assert!(Tree::parse(bad).is_err(), "{bad:?}");
        }
    }
}
