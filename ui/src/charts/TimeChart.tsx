// A uPlot time series chart that follows its container's width.
import { useEffect, useRef } from 'react';
import type uPlot from 'uplot';
import type { AlignedData, Options } from 'uplot';

export interface ChartSeries {
  label: string;
  color: string;
  values: (number | null)[];
}

function cssVar(name: string, fallback: string): string {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

export function TimeChart({
  title,
  times,
  series,
  format,
}: {
  title: string;
  /** Unix seconds. */
  times: number[];
  series: ChartSeries[];
  format: (v: number) => string;
}) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const labels = series.map((s) => s.label).join('|');
  // The newest data, for a chart made after uPlot has loaded.
  const data = useRef<AlignedData>([]);
  data.current = [times, ...series.map((s) => s.values)] as AlignedData;

  useEffect(() => {
    let gone = false;
    let destroy: (() => void) | undefined;
    // uPlot loads with the first chart shown, not with the VM list.
    import('uplot').then(
      ({ default: UPlot }) => {
        if (!gone && el.current) destroy = draw(UPlot, el.current);
      },
      (e: Error) => console.error(`the chart ${title} cannot be drawn: uPlot did not load: ${e.message}`),
    );
    return () => {
      gone = true;
      destroy?.();
    };
    // Rebuilt only when the set of series changes; data updates go through setData.
  }, [labels]);

  /** Draws the chart in `node`; returns what removes it. */
  function draw(UPlot: typeof uPlot, node: HTMLDivElement): () => void {
    const text = cssVar('--pf-t--global--text--color--subtle', '#6a6e73');
    const grid = cssVar('--pf-t--global--border--color--default', '#d2d2d2');
    const axis = { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const opts: Options = {
      width: Math.max(200, node.clientWidth),
      height: 220,
      scales: {
        // With one reading uPlot would span years; show the last five minutes instead.
        x: { time: true, range: (_u, min, max) => (max - min < 60 ? [max - 300, max + 10] : [min, max]) },
      },
      series: [
        {},
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: 2,
          spanGaps: false,
          value: (_u: uPlot, v: number | null) => (v == null ? '—' : format(v)),
        })),
      ],
      axes: [axis, { ...axis, size: 80, values: (_u: uPlot, vals: number[]) => vals.map((v) => format(v)) }],
    };
    const u = new UPlot(opts, data.current, node);
    plot.current = u;
    const ro = new ResizeObserver(() => u.setSize({ width: Math.max(200, node.clientWidth), height: 220 }));
    ro.observe(node);
    return () => {
      ro.disconnect();
      u.destroy();
      plot.current = null;
    };
  }

  useEffect(() => {
    plot.current?.setData([times, ...series.map((s) => s.values)] as AlignedData);
  }, [times, series]);

  return <div ref={el} className="vp-chart" role="img" aria-label={title} />;
}
