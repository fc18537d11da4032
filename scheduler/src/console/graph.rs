//! A workflow drawn as inline SVG on the server (SPEC §10): steps placed in layers, left to
//! right — a step one column after its furthest predecessor — each layer ordered by where
//! its predecessors sit (fewer crossings), edges as curves with arrows. A step is a box
//! with its name and one line of detail, coloured by its status (`status-<status>` for
//! the stylesheet), a link when it has one, and its facts in a tooltip. No script.

use std::fmt::Write as _;

use super::charts::escape;

/// One step to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Vertex {
    pub name: String,
    /// Indexes of its predecessors.
    pub after: Vec<usize>,
    pub map: bool,
    /// Its status in an instance; `None` in a definition.
    pub status: Option<String>,
    /// The second line: its job, its duration, its elements.
    pub detail: String,
    pub href: Option<String>,
}

const BOX_W: f64 = 168.0;
const BOX_H: f64 = 46.0;
const GAP_X: f64 = 64.0;
const GAP_Y: f64 = 22.0;
const MARGIN: f64 = 12.0;

/// Where each step goes: its layer (column) and its row in that layer.
pub fn layout(nodes: &[Vertex]) -> Vec<(usize, usize)> {
    let n = nodes.len();
    // Longest path from a root; the graph is acyclic (validated), and `after` may point
    // forward in the list, so iterate to a fixed point (at most n rounds).
    let mut layer = vec![0usize; n];
    for _ in 0..n {
        let mut moved = false;
        for (i, node) in nodes.iter().enumerate() {
            let want = node
                .after
                .iter()
                .filter(|&&p| p < n)
                .map(|&p| layer[p] + 1)
                .max()
                .unwrap_or(0);
            if want > layer[i] {
                layer[i] = want;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    let depth = layer.iter().copied().max().map_or(0, |d| d + 1);
    let mut row = vec![0usize; n];
    for l in 0..depth {
        let mut members: Vec<usize> = (0..n).filter(|&i| layer[i] == l).collect();
        // Ordered by the mean row of their predecessors (placed already), then as written.
        let key = |i: usize| -> f64 {
            let preds = &nodes[i].after;
            if preds.is_empty() {
                i as f64
            } else {
                preds.iter().map(|&p| row[p] as f64).sum::<f64>() / preds.len() as f64
            }
        };
        members.sort_by(|&a, &b| key(a).total_cmp(&key(b)).then(a.cmp(&b)));
        for (r, &i) in members.iter().enumerate() {
            row[i] = r;
        }
    }
    layer.into_iter().zip(row).collect()
}

/// The graph of `nodes` as an `<svg>` element, labelled `caption`.
pub fn draw(nodes: &[Vertex], caption: &str) -> String {
    let places = layout(nodes);
    let columns = places.iter().map(|p| p.0 + 1).max().unwrap_or(1);
    let rows = places.iter().map(|p| p.1 + 1).max().unwrap_or(1);
    let width = 2.0 * MARGIN + columns as f64 * BOX_W + (columns - 1) as f64 * GAP_X;
    let height = 2.0 * MARGIN + rows as f64 * BOX_H + (rows - 1) as f64 * GAP_Y;
    let at = |i: usize| {
        let (l, r) = places[i];
        (
            MARGIN + l as f64 * (BOX_W + GAP_X),
            MARGIN + r as f64 * (BOX_H + GAP_Y),
        )
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="graph" viewBox="0 0 {width:.0} {height:.0}" width="{width:.0}" role="img" aria-label="{}"><defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z"/></marker></defs>"#,
        escape(caption)
    );
    for (i, node) in nodes.iter().enumerate() {
        let (x2, y2) = at(i);
        for &p in node.after.iter().filter(|&&p| p < nodes.len()) {
            let (x1, y1) = at(p);
            let (sx, sy, ex, ey) = (x1 + BOX_W, y1 + BOX_H / 2.0, x2, y2 + BOX_H / 2.0);
            let mid = (sx + ex) / 2.0;
            let _ = write!(
                svg,
                r#"<path class="edge" d="M{sx:.1},{sy:.1} C{mid:.1},{sy:.1} {mid:.1},{ey:.1} {ex:.1},{ey:.1}" marker-end="url(#arrow)"/>"#
            );
        }
    }
    for (i, node) in nodes.iter().enumerate() {
        let (x, y) = at(i);
        let status = node.status.as_deref().unwrap_or("defined");
        let mut tip = format!("{}: {status}", node.name);
        if !node.detail.is_empty() {
            tip.push_str(&format!(" · {}", node.detail));
        }
        if let Some(href) = &node.href {
            let _ = write!(svg, r#"<a href="{}">"#, escape(href));
        }
        let _ = write!(
            svg,
            r#"<g class="step status-{status}{map}"><title>{tip}</title>"#,
            status = escape(status),
            map = if node.map { " map" } else { "" },
            tip = escape(&tip),
        );
        if node.map {
            // A map's elements: a second box behind the first.
            let _ = write!(
                svg,
                r#"<rect class="behind" x="{:.1}" y="{:.1}" width="{BOX_W}" height="{BOX_H}" rx="6"/>"#,
                x + 4.0,
                y - 4.0
            );
        }
        let _ = write!(
            svg,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{BOX_W}" height="{BOX_H}" rx="6"/><text class="name" x="{:.1}" y="{:.1}">{}</text><text class="detail" x="{:.1}" y="{:.1}">{}</text></g>"#,
            x + 10.0,
            y + 19.0,
            escape(&clip(&node.name, 22)),
            x + 10.0,
            y + 36.0,
            escape(&clip(&node.detail, 28)),
        );
        if node.href.is_some() {
            svg.push_str("</a>");
        }
    }
    svg.push_str("</svg>");
    svg
}

/// `text`, cut to `max` characters with an ellipsis.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let head: String = text.chars().take(max - 1).collect();
    format!("{head}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, after: &[usize]) -> Vertex {
        Vertex {
            name: name.into(),
            after: after.to_vec(),
            map: false,
            status: None,
            detail: String::new(),
            href: None,
        }
    }

    #[test]
    fn a_diamond_is_three_layers_and_the_join_follows_both_branches() {
        let nodes = [
            node("fetch", &[]),
            node("a", &[0]),
            node("b", &[0]),
            node("join", &[1, 2]),
        ];
        assert_eq!(layout(&nodes), [(0, 0), (1, 0), (1, 1), (2, 0)]);
        // A predecessor written after its step still comes before it.
        let backwards = [node("last", &[1]), node("first", &[])];
        assert_eq!(layout(&backwards), [(1, 0), (0, 0)]);
    }

    #[test]
    fn a_layer_follows_the_rows_of_its_predecessors() {
        // x follows b (row 1), y follows a (row 0): y is drawn above x.
        let nodes = [
            node("a", &[]),
            node("b", &[]),
            node("x", &[1]),
            node("y", &[0]),
        ];
        assert_eq!(layout(&nodes), [(0, 0), (0, 1), (1, 1), (1, 0)]);
    }

    #[test]
    fn boxes_never_overlap_and_text_is_escaped_and_coloured_by_status() {
        let mut nodes: Vec<Vertex> = (0..6).map(|i| node(&format!("s{i}"), &[])).collect();
        nodes.push(node("<join & done>", &[0, 1, 2, 3, 4, 5]));
        nodes[6].status = Some("running".into());
        nodes[6].map = true;
        nodes[6].href = Some("/console/runs/7?a=1&b=2".into());
        let places = layout(&nodes);
        for i in 0..places.len() {
            for j in 0..i {
                assert_ne!(places[i], places[j], "{i} and {j} share a place");
            }
        }
        let svg = draw(&nodes, "order \"pipeline\"");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches(r#"class="edge""#).count(), 6);
        assert!(svg.contains("&lt;join &amp; done&gt;"));
        assert!(!svg.contains("<join"));
        assert!(svg.contains(r#"class="step status-running map""#));
        assert!(svg.contains(r#"href="/console/runs/7?a=1&amp;b=2""#));
        assert!(svg.contains(r#"aria-label="order &quot;pipeline&quot;""#));
        assert_eq!(svg.matches("status-defined").count(), 6);
        assert_eq!(clip("abcdef", 4), "abc…");
    }
}
