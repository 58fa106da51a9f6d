//! One SVG chart per workload (`lanefs bench --svg DIR`): throughput against thread count,
//! a panel per timed phase, a line per variant (per target in a `--compare` run) labelled
//! at its right end, and the control loop's scaling drawn as the machine's ceiling.
//!
//! Text is plotters' SVG `<text>`: without a font feature plotters estimates text widths
//! itself (no fontconfig, no font files) and the viewer picks the sans-serif face.

use super::{push_unique, summary, Record};
use crate::target::PATH_VARIANT;
use crate::variant::DEFAULT_VARIANT;
use crate::workloads::{self, bufio, bufio64k, control, rtfrag};
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A panel's size in pixels; a chart of one panel is [`WIDE`] wide instead.
const PANEL: (u32, u32) = (480, 330);
const WIDE: u32 = 760;
const FONT: &str = "sans-serif";
/// Plotters font sizes (the SVG's are these / 1.24) and the pixels a character of the
/// small size takes, for layout.
const BIG: u32 = 22;
const SMALL: u32 = 15;
const CHAR_PX: f64 = 7.3;
const TITLE_CHAR_PX: f64 = 11.0;
/// A panel's y axis is logarithmic when its largest point exceeds its smallest this much.
const LOG_SPREAD: f64 = 20.0;
/// bufio's phase of plain memory copies, drawn as its ceiling rather than as a variant.
const MEMCPY: &str = bufio::PHASES[0];
const CEILING: &str = "control ceiling";
const MEMCPY_LABEL: &str = "memcpy ceiling";
/// Line colours: the default (patched) variant takes the first, the others the rest.
const PALETTE: [RGBColor; 7] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
];
const BASELINE_PEN: Pen = Pen::solid(RGBColor(150, 150, 150), 2);
const KERNEL_PEN: Pen = Pen {
    markers: true,
    ..Pen::dashed(BLACK, 2, (9, 5))
};
const CEILING_PEN: Pen = Pen::dashed(RGBColor(170, 170, 170), 2, (6, 5));
const MEMCPY_PEN: Pen = Pen::dashed(RGBColor(90, 110, 130), 2, (2, 4));

/// How a line is drawn; measured lines get a marker at each point, ceilings none.
#[derive(Clone, Copy, PartialEq)]
struct Pen {
    color: RGBColor,
    width: u32,
    dash: Option<(u32, u32)>,
    markers: bool,
}

impl Pen {
    const fn solid(color: RGBColor, width: u32) -> Pen {
        Pen {
            color,
            width,
            dash: None,
            markers: true,
        }
    }
    const fn dashed(color: RGBColor, width: u32, dash: (u32, u32)) -> Pen {
        Pen {
            color,
            width,
            dash: Some(dash),
            markers: false,
        }
    }
    fn style(&self) -> ShapeStyle {
        ShapeStyle {
            color: self.color.to_rgba(),
            filled: true,
            stroke_width: self.width,
        }
    }
}

/// One line of a panel: its label and its median at each thread count it ran.
struct Line {
    label: String,
    pen: Pen,
    points: Vec<(usize, f64)>,
}

/// One phase of the workload, in the unit of its y axis.
struct Panel {
    phase: String,
    unit: &'static str,
    lines: Vec<Line>,
}

/// Everything one chart draws.
struct Chart {
    title: String,
    notes: String,
    threads: Vec<usize>,
    oversubscribed: Vec<usize>,
    panels: Vec<Panel>,
}

/// One SVG per workload in `records` (not the control loop), written to `dir` (created if
/// missing) as `<workload>.svg`; returns the paths written, in the order workloads first
/// appear.
pub fn write_charts(records: &[Record], dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut names: Vec<&str> = Vec::new();
    for r in records.iter().filter(|r| r.workload != control::NAME) {
        push_unique(&mut names, r.workload.as_str());
    }
    let mut written = Vec::new();
    for name in names {
        let Some(chart) = chart(records, name) else {
            continue;
        };
        let svg = render(&chart).map_err(|e| format!("drawing the chart of {name}: {e}"))?;
        let path = dir.join(format!("{name}.svg"));
        std::fs::write(&path, svg).map_err(|e| format!("writing {}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The SVG text of one workload's chart, or None when records hold no run of it (nor
/// when drawing fails, which an SVG held in memory does not; [`write_charts`] reports it).
pub fn chart_svg(records: &[Record], workload: &str) -> Option<String> {
    render(&chart(records, workload)?).ok()
}

/// What a workload's chart draws, from its records and the control loop's.
fn chart(records: &[Record], workload: &str) -> Option<Chart> {
    let recs: Vec<&Record> = records
        .iter()
        .filter(|r| r.workload == workload && workload != control::NAME)
        .collect();
    let (mut series, mut phases, mut threads, mut targets) = (vec![], vec![], vec![], vec![]);
    for r in &recs {
        push_unique(&mut series, (r.target.as_str(), r.variant.as_str()));
        push_unique(&mut phases, r.phase.as_str());
        push_unique(&mut threads, r.threads);
        push_unique(&mut targets, r.target.as_str());
    }
    threads.sort_unstable();
    let pens = pens(workload, &series);
    let ctl = control_rates(records, &targets, &threads);
    let value = |r: &Record| super::rate(workload, r);
    let memcpy = medians(recs.iter().filter(|r| r.phase == MEMCPY), &threads, value);
    let mut panels = Vec::new();
    for &phase in phases
        .iter()
        .filter(|&&p| workload != bufio::NAME || p != MEMCPY)
    {
        let mut lines: Vec<Line> = (series.iter().zip(&pens))
            .map(|(&(t, v), &pen)| Line {
                label: label(t, v, targets.len() > 1),
                pen,
                points: medians(
                    recs.iter()
                        .filter(|r| (r.phase.as_str(), &*r.target, &*r.variant) == (phase, t, v)),
                    &threads,
                    value,
                ),
            })
            .filter(|l| !l.points.is_empty())
            .collect();
        lines.extend(ceiling(&lines, &ctl));
        if workload == bufio::NAME && phase != "cold-read" && !memcpy.is_empty() {
            let (label, pen, points) = (MEMCPY_LABEL.to_string(), MEMCPY_PEN, memcpy.clone());
            lines.push(Line { label, pen, points });
        }
        panels.push(Panel {
            phase: phase.to_string(),
            unit: unit(workload, phase),
            lines,
        });
    }
    let oversubscribed = threads
        .iter()
        .copied()
        .filter(|&n| recs.iter().any(|r| r.threads == n && r.oversubscribed))
        .collect();
    let reps = recs.iter().map(|r| r.rep).max()?;
    let notes = notes(&targets, reps, &panels);
    let title = title(workload);
    Some(Chart {
        title,
        notes,
        threads,
        oversubscribed,
        panels,
    })
}

/// The median of `value` over the records at each of `threads` where some ran.
fn medians<'a>(
    recs: impl Iterator<Item = &'a &'a Record> + Clone,
    threads: &[usize],
    value: impl Fn(&Record) -> f64,
) -> Vec<(usize, f64)> {
    let at = |n: usize| -> Vec<f64> {
        recs.clone()
            .filter(|r| r.threads == n)
            .map(|r| value(r))
            .collect()
    };
    threads
        .iter()
        .filter_map(|&n| {
            Some(at(n))
                .filter(|v| !v.is_empty())
                .map(|v| (n, summary(v).0))
        })
        .collect()
}

/// The control loop's median rate at each thread count, on the first of `targets` it ran
/// on, else on its own target (a `--compare` run's).
fn control_rates(records: &[Record], targets: &[&str], threads: &[usize]) -> Vec<(usize, f64)> {
    let ctl: Vec<&Record> = records
        .iter()
        .filter(|r| r.workload == control::NAME)
        .collect();
    let on = |t: &str| ctl.iter().any(|r| r.target == t);
    let first = ctl.first().map(|r| r.target.as_str());
    let Some(target) = targets.iter().copied().find(|t| on(t)).or(first) else {
        return Vec::new();
    };
    medians(ctl.iter().filter(|r| r.target == target), threads, |r| {
        r.ops_per_sec
    })
}

/// The machine's ceiling for `lines`: ceiling(N) = best rate at the fewest threads (t0,
/// normally 1) x control(N) / control(t0), i.e. N x the control loop's efficiency at N.
fn ceiling(lines: &[Line], ctl: &[(usize, f64)]) -> Option<Line> {
    let at = |n: usize| {
        lines
            .iter()
            .filter_map(move |l| l.points.iter().find(|p| p.0 == n))
    };
    let &(t0, c0) = ctl.iter().find(|c| at(c.0).next().is_some())?;
    let best = at(t0).map(|p| p.1).fold(0.0, f64::max);
    (c0 > 0.0).then(|| Line {
        label: CEILING.to_string(),
        pen: CEILING_PEN,
        points: ctl.iter().map(|&(n, c)| (n, best * c / c0)).collect(),
    })
}

fn unit(workload: &str, phase: &str) -> &'static str {
    match workload {
        bufio::NAME | bufio64k::NAME => "GiB/s",
        rtfrag::NAME if phase == "free" => "frees/s",
        rtfrag::NAME => "allocations/s",
        _ => "ops/s",
    }
}

/// A line's name: the variant, or the target where a run has several (the kernel's ext4
/// as "kernel ext4").
fn label(target: &str, variant: &str, many_targets: bool) -> String {
    match (target, variant == PATH_VARIANT, many_targets) {
        (super::KERNEL, _, _) => "kernel ext4".to_string(),
        (_, true, _) => target.to_string(),
        (_, false, true) => format!("{target} {variant}"),
        (_, false, false) => variant.to_string(),
    }
}

/// Each series' pen: the kernel black and dashed, the baseline (the workload family's
/// first baseline that ran, or fuse2fs) grey, the default variant (or lanefs's FUSE
/// mount) bold, the others in the palette's colours.
fn pens(workload: &str, series: &[(&str, &str)]) -> Vec<Pen> {
    let variants: Vec<&str> = series.iter().map(|s| s.1).collect();
    let base = super::baseline(workload, &variants);
    let mut others = PALETTE[1..].iter().cycle();
    (series.iter())
        .map(|&(target, variant)| match target {
            super::KERNEL => KERNEL_PEN,
            super::FUSE2FS => BASELINE_PEN,
            _ if base == Some(variant) => BASELINE_PEN,
            _ if target == super::LANEFS || variant == DEFAULT_VARIANT => Pen::solid(PALETTE[0], 4),
            _ => Pen::solid(*others.next().unwrap_or(&PALETTE[1]), 2),
        })
        .collect()
}

/// The workload's name and what it measures.
fn title(workload: &str) -> String {
    match workloads::find(workload) {
        Some(w) => format!("{workload}: {}", w.about()),
        None => workload.to_string(),
    }
}

/// The chart's notes: where it ran, what a point is, and what the dashed lines mean.
fn notes(targets: &[&str], reps: usize, panels: &[Panel]) -> String {
    let has = |l: &str| panels.iter().any(|p| p.lines.iter().any(|x| x.label == l));
    let reps = match reps {
        1 => "one run".to_string(),
        n => format!("the median of {n} reps"),
    };
    let mut s = format!("On {}; each point is {reps}.", targets.join(", "));
    if has(CEILING) {
        s += " Control ceiling: the best rate at 1 thread × the scaling of a loop that shares \
              no memory, in the same run.";
    }
    if has(MEMCPY_LABEL) {
        s += " Memcpy ceiling: the same 64 KiB copies from memory, no file system.";
    }
    if panels.iter().any(|p| y_axis(&p.lines).log) {
        s += " Log y axis where lines differ more than 20x.";
    }
    s + " * = more threads than CPUs."
}

/// An axis: linear over `range` with the ticks given (plotters' f64 axis picks its own),
/// or, when `log`, linear in log10 of the value.
#[derive(Clone)]
struct Axis {
    log: bool,
    range: Range<f64>,
    ticks: Vec<f64>,
}

impl Axis {
    /// Where `v` sits on the axis (`None` for a value a log axis cannot show).
    fn coord(&self, v: f64) -> Option<f64> {
        match self.log {
            true => (v > 0.0).then(|| v.log10()),
            false => Some(v),
        }
    }
    /// The value at `y` on the axis.
    fn value(&self, y: f64) -> f64 {
        match self.log {
            true => 10f64.powf(y),
            false => y,
        }
    }
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;
    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let share = (v - self.range.start) / (self.range.end - self.range.start);
        limit.0 + (share * f64::from(limit.1 - limit.0)).round() as i32
    }
    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        match hint.weight().allow_light_points() {
            true => Vec::new(),
            false => self.ticks.clone(),
        }
    }
    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

/// A panel's y axis: from 0 with 1-2-2.5-5 steps, or logarithmic (1-2-5 ticks) when its
/// measured points differ more than [`LOG_SPREAD`] times (a `--compare` run's kernel).
fn y_axis(lines: &[Line]) -> Axis {
    let values = |measured: bool| {
        let lines = lines.iter().filter(move |l| l.pen.markers || !measured);
        lines.flat_map(|l| l.points.iter().map(|p| p.1))
    };
    let lo = values(true)
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let hi = values(false).fold(0.0, f64::max);
    if hi / lo > LOG_SPREAD {
        let (a, b) = (lo.log10() - 0.1, hi.log10() + 0.08);
        let steps: &[f64] = if hi / lo > 2000.0 {
            &[1.0]
        } else {
            &[1.0, 2.0, 5.0]
        };
        let decades = a.floor() as i32..=b.ceil() as i32;
        let ticks = (decades.flat_map(|e| steps.iter().map(move |m| (m * 10f64.powi(e)).log10())))
            .filter(|t| (a..=b).contains(t))
            .collect();
        return Axis {
            log: true,
            range: a..b,
            ticks,
        };
    }
    let hi = if hi > 0.0 { hi } else { 1.0 };
    let mag = 10f64.powf((hi / 5.0).log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| s * 5.0 >= hi);
    let step = step.unwrap_or(10.0 * mag);
    let top = (hi * 1.04 / step).ceil() * step;
    let ticks = (0..=(top / step).round() as usize)
        .map(|i| i as f64 * step)
        .collect();
    Axis {
        log: false,
        range: 0.0..top,
        ticks,
    }
}

/// A tick value, short: "120k", "1.25M", "0.5".
fn fmt_num(v: f64) -> String {
    let (x, suffix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let s = format!("{x:.3}");
    format!("{}{suffix}", s.trim_end_matches('0').trim_end_matches('.'))
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn text_px(s: &str) -> i32 {
    (s.chars().count() as f64 * CHAR_PX).ceil() as i32
}

/// `text` broken into lines of at most `width` pixels.
fn wrap(text: &str, width: i32) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let last = lines
            .last_mut()
            .filter(|l| l.is_empty() || text_px(l) + text_px(word) < width);
        match last {
            Some(l) if l.is_empty() => l.push_str(word),
            Some(l) => *l += &format!(" {word}"),
            None => lines.push(word.to_string()),
        }
    }
    lines
}

/// The chart as SVG: the header (title, notes, legend) above a grid of panels.
fn render(c: &Chart) -> Result<String, String> {
    let cols = match c.panels.len() {
        1 => 1,
        2 | 4 => 2,
        _ => 3,
    };
    let rows = c.panels.len().div_ceil(cols).max(1);
    let title = (c.title.chars().count() as f64 * TITLE_CHAR_PX) as u32 + 24;
    let grid = if cols == 1 {
        WIDE
    } else {
        cols as u32 * PANEL.0
    };
    let width = title.max(grid);
    let notes = wrap(&c.notes, width as i32 - 24);
    let legend = legend_rows(c, width as i32 - 24);
    let header = 44 + 17 * notes.len() as u32 + 20 * legend.len() as u32;
    let mut svg = String::new();
    {
        let size = (width, header + rows as u32 * PANEL.1);
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (head, body) = root.split_vertically(header);
        let bold = (FONT, BIG).into_font().style(FontStyle::Bold);
        head.draw(&Text::new(c.title.as_str(), (12, 10), bold))
            .map_err(err)?;
        for (i, line) in notes.iter().enumerate() {
            let at = (12, 40 + 17 * i as i32);
            head.draw(&Text::new(line.as_str(), at, (FONT, SMALL)))
                .map_err(err)?;
        }
        for (i, row) in legend.iter().enumerate() {
            let y = 52 + 17 * notes.len() as i32 + 20 * i as i32;
            for (x, label, pen) in row {
                draw_line(
                    &head,
                    Pen {
                        markers: false,
                        ..*pen
                    },
                    &[(*x, y), (x + 26, y)],
                )?;
                draw_label(&head, label, *pen, (x + 32, y))?;
            }
        }
        for (panel, area) in c.panels.iter().zip(body.split_evenly((rows, cols))) {
            draw_panel(&area, panel, c)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The legend's entries (every line's label once) placed in rows of at most `width`
/// pixels: x, label, pen.
fn legend_rows(c: &Chart, width: i32) -> Vec<Vec<(i32, &str, Pen)>> {
    let mut seen: Vec<&str> = Vec::new();
    let mut rows: Vec<Vec<(i32, &str, Pen)>> = vec![Vec::new()];
    let mut x = 12;
    for line in c.panels.iter().flat_map(|p| &p.lines) {
        if seen.contains(&line.label.as_str()) {
            continue;
        }
        seen.push(&line.label);
        let w = 32 + text_px(&line.label) + 22;
        if x + w > width && x > 12 {
            rows.push(Vec::new());
            x = 12;
        }
        if let Some(row) = rows.last_mut() {
            row.push((x, line.label.as_str(), line.pen));
        }
        x += w;
    }
    rows
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A line through `points` (pixels of `area`), with a marker at each where the pen has them.
fn draw_line(area: &Area<'_>, pen: Pen, points: &[(i32, i32)]) -> Result<(), String> {
    let path = points.to_vec();
    match pen.dash {
        Some((d, g)) => area.draw(&DashedPathElement::new(path, d, g, pen.style())),
        None => area.draw(&PathElement::new(path, pen.style())),
    }
    .map_err(err)?;
    for &at in points.iter().filter(|_| pen.markers) {
        let dot = Circle::new(at, pen.width + 1, pen.style().filled());
        area.draw(&dot).map_err(err)?;
    }
    Ok(())
}

/// `text` in the pen's colour (bold for a bold pen), its left end and middle at `at`.
fn draw_label(area: &Area<'_>, text: &str, pen: Pen, at: (i32, i32)) -> Result<(), String> {
    let font = match pen.width >= 4 {
        true => (FONT, SMALL).into_font().style(FontStyle::Bold),
        false => (FONT, SMALL).into_font(),
    };
    // The ceiling's light grey is too faint for text.
    let color = if pen == CEILING_PEN {
        RGBColor(120, 120, 120)
    } else {
        pen.color
    };
    let style = font.color(&color).pos(Pos::new(HPos::Left, VPos::Center));
    area.draw(&Text::new(text, at, style)).map_err(err)
}

/// One panel: axes and grid, the lines (ceilings under measured lines, the bold line on
/// top), and each line's label at its right end.
fn draw_panel(area: &Area<'_>, p: &Panel, c: &Chart) -> Result<(), String> {
    let y = y_axis(&p.lines);
    let n = c.threads.len();
    let x = Axis {
        log: false,
        range: -0.3..n as f64 - 0.7,
        ticks: (0..n).map(|i| i as f64).collect(),
    };
    let labels = p.lines.iter().map(|l| text_px(&l.label)).max().unwrap_or(0);
    let mut chart = ChartBuilder::on(area)
        .caption(&p.phase, (FONT, 18))
        .margin(8)
        .margin_right(labels + 22)
        .x_label_area_size(42)
        .y_label_area_size(58)
        .build_cartesian_2d(x, y.clone())
        .map_err(err)?;
    let x_label = |x: &f64| {
        let n = c
            .threads
            .get(x.round().max(0.0) as usize)
            .copied()
            .unwrap_or(0);
        let star = if c.oversubscribed.contains(&n) {
            "*"
        } else {
            ""
        };
        format!("{n}{star}")
    };
    let y_label = |v: &f64| fmt_num(y.value(*v));
    let y_desc = if y.log {
        format!("{} (log)", p.unit)
    } else {
        p.unit.to_string()
    };
    (chart.configure_mesh())
        .x_desc("threads")
        .y_desc(y_desc)
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .bold_line_style(RGBColor(228, 228, 228))
        .label_style((FONT, SMALL))
        .axis_desc_style((FONT, SMALL))
        .draw()
        .map_err(err)?;
    let base = area.get_base_pixel();
    let pixel = |n: usize, v: f64| {
        let i = c.threads.iter().position(|&t| t == n)?;
        let (px, py) = chart.backend_coord(&(i as f64, y.coord(v)?));
        Some((px - base.0, py - base.1))
    };
    let mut order: Vec<&Line> = p.lines.iter().collect();
    order.sort_by_key(|l| (l.pen.markers, l.pen.width));
    let mut ends = Vec::new();
    for line in order {
        let points: Vec<(i32, i32)> = line
            .points
            .iter()
            .filter_map(|&(n, v)| pixel(n, v))
            .collect();
        draw_line(area, line.pen, &points)?;
        ends.extend(points.last().map(|&end| (end, line)));
    }
    let (_, ys) = chart.plotting_area().get_pixel_range();
    draw_end_labels(area, &ends, ys.start - base.1..ys.end - base.1)
}

/// Each line's label just right of its last point (`ends`), moved up or down (with a
/// leader) where labels would overlap, kept within `ys` where there is room.
fn draw_end_labels(
    area: &Area<'_>,
    ends: &[((i32, i32), &Line)],
    ys: Range<i32>,
) -> Result<(), String> {
    const GAP: i32 = 16;
    let mut at: Vec<i32> = ends.iter().map(|e| e.0 .1).collect();
    let mut order: Vec<usize> = (0..at.len()).collect();
    order.sort_by_key(|&i| at[i]);
    let mut prev = ys.start - GAP;
    for &i in &order {
        at[i] = at[i].max(prev + GAP);
        prev = at[i];
    }
    let mut next = ys.end + GAP;
    for &i in order.iter().rev() {
        at[i] = at[i].min(next - GAP);
        next = at[i];
    }
    for (&((x, y), line), label_y) in ends.iter().zip(at) {
        if (label_y - y).abs() > 5 {
            let leader = Pen {
                width: 1,
                dash: None,
                markers: false,
                ..line.pen
            };
            draw_line(area, leader, &[(x + 4, y), (x + 12, label_y)])?;
        }
        draw_label(area, &line.label, line.pen, (x + 14, label_y))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
