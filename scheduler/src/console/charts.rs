//! Charts drawn on the server as inline SVG: no script, no library, readable without
//! JavaScript. Every number in them is formatted here, and labels are escaped.

use std::fmt::Write as _;

/// One bar: succeeded runs stacked under the others (failed, timed out, killed, lost).
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub ok: i64,
    pub bad: i64,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 160.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 20.0;
const LEFT: f64 = 40.0;

/// A stacked bar chart of `bars`, left to right, labelled at both ends; each bar's
/// numbers are in its tooltip.
pub fn stacked_bars(bars: &[Bar], caption: &str) -> String {
    let max = bars.iter().map(|b| b.ok + b.bad).max().unwrap_or(0).max(1);
    let plot_h = HEIGHT - TOP - BOTTOM;
    let slot = (WIDTH - LEFT) / bars.len().max(1) as f64;
    let bar_w = (slot * 0.8).max(1.0);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{}">"#,
        escape(caption)
    );
    let _ = write!(
        svg,
        r#"<text x="{x}" y="{y}" class="axis" text-anchor="end">{max}</text><text x="{x}" y="{y0}" class="axis" text-anchor="end">0</text><line x1="{LEFT}" y1="{base}" x2="{WIDTH}" y2="{base}" class="axis"/>"#,
        x = LEFT - 4.0,
        y = TOP + 4.0,
        y0 = TOP + plot_h,
        base = TOP + plot_h,
    );
    for (i, b) in bars.iter().enumerate() {
        let x = LEFT + i as f64 * slot + (slot - bar_w) / 2.0;
        let h_ok = plot_h * b.ok as f64 / max as f64;
        let h_bad = plot_h * b.bad as f64 / max as f64;
        let base = TOP + plot_h;
        let _ = write!(
            svg,
            r#"<g><title>{}: {} succeeded, {} not</title><rect class="ok" x="{x:.1}" y="{:.1}" width="{bar_w:.1}" height="{h_ok:.1}"/><rect class="bad" x="{x:.1}" y="{:.1}" width="{bar_w:.1}" height="{h_bad:.1}"/></g>"#,
            escape(&b.label),
            b.ok,
            b.bad,
            base - h_ok,
            base - h_ok - h_bad,
        );
    }
    if let (Some(first), Some(last)) = (bars.first(), bars.last()) {
        let _ = write!(
            svg,
            r#"<text x="{LEFT}" y="{HEIGHT}" class="axis">{}</text><text x="{WIDTH}" y="{HEIGHT}" class="axis" text-anchor="end">{}</text>"#,
            escape(&first.label),
            escape(&last.label)
        );
    }
    svg.push_str("</svg>");
    svg
}

pub(super) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_tallest_and_labels_are_escaped() {
        let bars = vec![
            Bar {
                label: "<10:00>".into(),
                ok: 30,
                bad: 10,
            },
            Bar {
                label: "10:01".into(),
                ok: 0,
                bad: 0,
            },
        ];
        let svg = stacked_bars(&bars, "runs & failures");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("aria-label=\"runs &amp; failures\""));
        assert!(svg.contains("&lt;10:00&gt;: 30 succeeded, 10 not"));
        assert!(!svg.contains("<10:00>"));
        // The tallest bar fills the plot: 124 px, three quarters of it succeeded.
        assert!(svg.contains(r#"height="93.0""#), "{svg}");
        assert!(svg.contains(r#"height="31.0""#), "{svg}");
        assert!(svg.contains(">40</text>"), "the axis shows the maximum");
        assert_eq!(stacked_bars(&[], "empty").matches("<rect").count(), 0);
    }
}
