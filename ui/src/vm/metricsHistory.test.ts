import { describe, expect, it } from 'vitest';
import { parsePrometheusText } from '../api/metricsText';
import { emptyHistory, MAX_POINTS, podUsage, pushPoint, vmCounters } from './metricsHistory';

describe('metrics history', () => {
  it('sums pod container usage', () => {
    const u = podUsage([
      { metadata: {}, containers: [{ name: 'compute', usage: { cpu: '12m', memory: '1Mi' } }, { name: 'x', usage: { cpu: '1500000n', memory: '1Ki' } }] },
    ]);
    expect(u.cpu).toBeCloseTo(0.0135, 10);
    expect(u.memory).toBe(2 ** 20 + 1024);
    expect(podUsage([])).toEqual({ cpu: null, memory: null });
  });

  it('turns counters into rates between readings', () => {
    const scrape = (rx: number) =>
      parsePrometheusText(`kubevirt_vmi_network_receive_bytes_total{name="vm",namespace="ns",interface="default"} ${rx}\n`);
    let h = pushPoint(emptyHistory(), 100, { cpu: 0.1, memory: 5 }, vmCounters(scrape(1000), 'ns', 'vm'));
    expect(h.rx).toEqual([null]);
    h = pushPoint(h, 110, { cpu: 0.2, memory: 6 }, vmCounters(scrape(3000), 'ns', 'vm'));
    expect(h.rx).toEqual([null, 200]);
    expect(h.tx).toEqual([null, null]); // not in the scrape
    expect(h.cpu).toEqual([0.1, 0.2]);
  });

  it('ignores the same VM name in another namespace', () => {
    const s = parsePrometheusText('kubevirt_vmi_network_receive_bytes_total{name="vm",namespace="other"} 5\n');
    expect(vmCounters(s, 'ns', 'vm').rx).toBeUndefined();
  });

  it('keeps at most an hour of points', () => {
    let h = emptyHistory();
    for (let i = 0; i < MAX_POINTS + 10; i++) h = pushPoint(h, i, { cpu: i, memory: i }, null);
    expect(h.t).toHaveLength(MAX_POINTS);
    expect(h.t[0]).toBe(10);
  });
});
