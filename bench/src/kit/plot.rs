//! Line charts as PNG files for bench/results/: a title, axis labels, one line per named series,
//! and optionally a logarithmic y axis; several charts may share one PNG, one above the other. Text is drawn with DejaVu Sans, loaded from Debian's
//! fonts-dejavu-core (installed with apt-get when missing and running as root).

use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

/// The font every chart uses, and the Debian package that provides it.
const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const FONT_PACKAGE: &str = "fonts-dejavu-core";
/// The family name charts ask plotters for; `register_font` maps it to FONT_PATH.
const FAMILY: &str = "sans-serif";

const WIDTH: u32 = 1100;
const HEIGHT: u32 = 700;

/// Line colours in series order: distinct in print and for the common colour blindnesses
/// (Okabe–Ito), repeated beyond eight series.
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

/// Point shapes in series order, so that lines lying on top of each other stay apart.
const MARKERS: [Marker; 4] = [
    Marker::Circle,
    Marker::Triangle,
    Marker::Square,
    Marker::Cross,
];

#[derive(Clone, Copy)]
enum Marker {
    Circle,
    Triangle,
    Square,
    Cross,
}

impl Marker {
    /// The shape at `offset` pixels from the point it is attached to.
    fn draw_at<DB: DrawingBackend>(
        self,
        offset: (i32, i32),
        colour: RGBColor,
    ) -> DynElement<'static, DB, (i32, i32)> {
        let (x, y) = offset;
        let filled = colour.filled();
        let stroke = colour.stroke_width(3);
        match self {
            Marker::Circle => Circle::new(offset, 6, filled).into_dyn(),
            Marker::Triangle => TriangleMarker::new(offset, 8, filled).into_dyn(),
            Marker::Square => Rectangle::new([(x - 5, y - 5), (x + 5, y + 5)], filled).into_dyn(),
            Marker::Cross => Cross::new(offset, 6, stroke).into_dyn(),
        }
    }
}

/// One line: its legend name and its (x, y) points, in x order.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart, written as a PNG by `write_png`.
#[derive(Debug, Clone)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// A logarithmic y axis; points with y ≤ 0 cannot be drawn on it and are left out.
    pub log_y: bool,
}

impl LineChart {
    /// Requests/s per round, a line per series: the chart most results files have.
    pub fn requests_per_round(title: String, series: Vec<Series>) -> LineChart {
        LineChart {
            title,
            x_label: "round".into(),
            y_label: "requests/s".into(),
            series,
            log_y: false,
        }
    }

    pub fn write_png(&self, path: &Path) -> anyhow::Result<()> {
        write_panels_png(path, std::slice::from_ref(self))
    }

    /// Draws the chart into `area`.
    fn draw_into(
        &self,
        area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    ) -> anyhow::Result<()> {
        let points = self.drawable_points();
        let (x_range, y_range) = axis_ranges(&points, self.log_y)
            .with_context(|| format!("nothing to plot in {:?}", self.title))?;
        let legend = legend_corner(&points, &x_range, &y_range, self.log_y);
        if self.log_y {
            self.draw(area, x_range, y_range.log_scale(), &points, legend)
        } else {
            self.draw(area, x_range, y_range, &points, legend)
        }
    }

    /// Each series' points that the y axis can show.
    fn drawable_points(&self) -> Vec<Vec<(f64, f64)>> {
        self.series
            .iter()
            .map(|s| {
                s.points
                    .iter()
                    .copied()
                    .filter(|&(x, y)| x.is_finite() && y.is_finite() && (!self.log_y || y > 0.0))
                    .collect()
            })
            .collect()
    }

    fn draw<Y>(
        &self,
        root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
        x_range: Range<f64>,
        y_range: Y,
        points: &[Vec<(f64, f64)>],
        legend: SeriesLabelPosition,
    ) -> anyhow::Result<()>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let failed = |e: &dyn std::fmt::Display| anyhow!("drawing {:?}: {e}", self.title);
        root.fill(&WHITE).map_err(|e| failed(&e))?;
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, (FAMILY, 26))
            .margin(20)
            .x_label_area_size(55)
            .y_label_area_size(80)
            .build_cartesian_2d(x_range, y_range)
            .map_err(|e| failed(&e))?;
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .label_style((FAMILY, 16))
            .axis_desc_style((FAMILY, 18))
            .x_label_formatter(&|x| tick_label(*x))
            .y_label_formatter(&|y| tick_label(*y))
            .light_line_style(RGBColor(235, 235, 235))
            .bold_line_style(RGBColor(200, 200, 200))
            .draw()
            .map_err(|e| failed(&e))?;
        for (i, (series, points)) in self.series.iter().zip(points).enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            let marker = MARKERS[i % MARKERS.len()];
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    colour.stroke_width(3),
                ))
                .map_err(|e| failed(&e))?
                .label(&series.name)
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(-4, 0), (26, 0)], colour.stroke_width(3))
                        + marker.draw_at((11, 0), colour)
                });
            chart
                .draw_series(
                    points
                        .iter()
                        .map(|&p| EmptyElement::at(p) + marker.draw_at((0, 0), colour)),
                )
                .map_err(|e| failed(&e))?;
        }
        chart
            .configure_series_labels()
            .position(legend)
            .label_font((FAMILY, 18))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .margin(12)
            .draw()
            .map_err(|e| failed(&e))?;
        Ok(())
    }
}

/// Writes `charts` into one PNG, one above the other, each the size of a single chart.
pub fn write_panels_png(path: &Path, charts: &[LineChart]) -> anyhow::Result<()> {
    if charts.is_empty() {
        bail!("no chart to write to {}", path.display());
    }
    ensure_font()?;
    let root = BitMapBackend::new(path, (WIDTH, HEIGHT * charts.len() as u32)).into_drawing_area();
    for (chart, area) in charts.iter().zip(root.split_evenly((charts.len(), 1))) {
        chart.draw_into(&area)?;
    }
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))
}

/// The corner for the legend: the one with the fewest points near it (upper left on a tie), so
/// that it hides as little of the lines as it can.
fn legend_corner(
    points: &[Vec<(f64, f64)>],
    x_range: &Range<f64>,
    y_range: &Range<f64>,
    log_y: bool,
) -> SeriesLabelPosition {
    let y_scale = |y: f64| if log_y { y.ln() } else { y };
    let share = |v: f64, lo: f64, hi: f64| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
    let (y_lo, y_hi) = (y_scale(y_range.start), y_scale(y_range.end));
    let near = |left: bool, upper: bool| {
        points
            .iter()
            .flatten()
            .filter(|&&(x, y)| {
                let x = share(x, x_range.start, x_range.end);
                let y = share(y_scale(y), y_lo, y_hi);
                (if left { x < 0.4 } else { x > 0.6 }) && (if upper { y > 0.6 } else { y < 0.4 })
            })
            .count()
    };
    [
        (SeriesLabelPosition::UpperLeft, near(true, true)),
        (SeriesLabelPosition::UpperRight, near(false, true)),
        (SeriesLabelPosition::LowerRight, near(false, false)),
        (SeriesLabelPosition::LowerLeft, near(true, false)),
    ]
    .into_iter()
    .min_by_key(|&(_, count)| count)
    .map_or(SeriesLabelPosition::UpperLeft, |(corner, _)| corner)
}

/// The x and y extents of all points, with some room around them (a factor on a log axis).
/// None when there is no point at all.
fn axis_ranges(points: &[Vec<(f64, f64)>], log_y: bool) -> Option<(Range<f64>, Range<f64>)> {
    let all = || points.iter().flatten();
    let (x_min, x_max) = extent(all().map(|p| p.0))?;
    let (y_min, y_max) = extent(all().map(|p| p.1))?;
    let x_pad = ((x_max - x_min) * 0.04).max(1.0);
    let x_range = (x_min - x_pad).max(0.0_f64.min(x_min))..x_max + x_pad;
    let y_range = if log_y {
        y_min / 1.6..y_max * 1.6
    } else {
        let pad = ((y_max - y_min) * 0.08).max(y_max.abs() * 0.05).max(1e-9);
        (y_min - pad).min(0.0_f64.max(y_min - pad))..y_max + pad
    };
    Some((x_range, y_range))
}

fn extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// Axis numbers without float noise: 1000, 2.5, 0.3, 1e-5.
fn tick_label(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude == 0.0 {
        "0".into()
    } else if !(1e-3..1e7).contains(&magnitude) {
        format!("{value:.0e}")
    } else if value.fract().abs() < 1e-9 {
        format!("{value:.0}")
    } else {
        let text = format!("{value:.3}");
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Registers DejaVu Sans with plotters once per process, installing the font package if it is
/// missing and this runs as root.
fn ensure_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| register_font().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!(e))
}

fn register_font() -> anyhow::Result<()> {
    if !Path::new(FONT_PATH).exists() {
        install_font_package()?;
    }
    let bytes = std::fs::read(FONT_PATH).with_context(|| format!("reading {FONT_PATH}"))?;
    // plotters keeps the font for the life of the process; this runs once.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{FONT_PATH} is not a font plotters can read"))
}

fn install_font_package() -> anyhow::Result<()> {
    eprintln!("the charts need {FONT_PATH}");
    crate::kit::tools::install(&[FONT_PACKAGE])?;
    if !Path::new(FONT_PATH).exists() {
        bail!("{FONT_PACKAGE} is installed but {FONT_PATH} is still missing");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_every_point_with_room() {
        let points = vec![vec![(100.0, 1.0), (1000.0, 900.0)], vec![(100.0, 2.0)]];
        let (x, y) = axis_ranges(&points, true).unwrap();
        assert!(x.start < 100.0 && x.end > 1000.0);
        assert!(y.start < 1.0 && y.start > 0.0 && y.end > 900.0);
        let (_, linear) = axis_ranges(&points, false).unwrap();
        assert!(linear.start <= 0.0 && linear.end > 900.0);
        assert!(axis_ranges(&[vec![]], true).is_none());
    }

    #[test]
    fn the_legend_goes_where_the_lines_are_not() {
        let corner = |points: Vec<(f64, f64)>| {
            let points = vec![points];
            let (x, y) = axis_ranges(&points, false).unwrap();
            format!("{:?}", legend_corner(&points, &x, &y, false))
        };
        // Falling lines fill the upper left: the legend goes upper right.
        assert_eq!(corner(vec![(0.0, 100.0), (10.0, 0.0)]), "UpperRight");
        // Rising lines leave the upper left free.
        assert_eq!(corner(vec![(0.0, 0.0), (10.0, 100.0)]), "UpperLeft");
    }

    #[test]
    fn tick_labels_hide_float_noise() {
        assert_eq!(tick_label(1000.0), "1000");
        assert_eq!(tick_label(2.5), "2.5");
        assert_eq!(tick_label(0.30000000000000004), "0.3");
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(0.00001), "1e-5");
    }

    #[test]
    fn log_charts_leave_out_points_they_cannot_show() {
        let chart = LineChart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![Series {
                name: "s".into(),
                points: vec![(1.0, 0.0), (2.0, 3.0), (3.0, f64::NAN)],
            }],
            log_y: true,
        };
        assert_eq!(chart.drawable_points(), vec![vec![(2.0, 3.0)]]);
    }

    #[test]
    fn a_chart_is_written_as_png() {
        if !Path::new(FONT_PATH).exists() {
            eprintln!("skipped: {FONT_PATH} is missing");
            return;
        }
        let path = std::env::temp_dir().join(format!("herdsman-plot-{}.png", std::process::id()));
        let chart = LineChart {
            title: "test".into(),
            x_label: "threads".into(),
            y_label: "count".into(),
            series: vec![
                Series {
                    name: "a".into(),
                    points: vec![(100.0, 1.0), (200.0, 10.0), (400.0, 100.0)],
                },
                Series {
                    name: "b".into(),
                    points: vec![(100.0, 2.0), (400.0, 2.0)],
                },
            ],
            log_y: true,
        };
        chart.write_png(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"));
        // The PNG header's height (bytes 20..24, big-endian): one chart, then two one above the
        // other.
        let height = |bytes: &[u8]| u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        assert_eq!(height(&bytes), HEIGHT);
        write_panels_png(&path, &[chart.clone(), chart]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(height(&bytes), 2 * HEIGHT);
        assert!(write_panels_png(&path, &[]).is_err());
    }
}
