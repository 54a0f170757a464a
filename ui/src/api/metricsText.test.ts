import { describe, expect, it } from 'vitest';
import { counterRate, parsePrometheusText, sumSamples } from './metricsText';

const TEXT = `# HELP kubevirt_vmi_network_receive_bytes_total Total network traffic received in bytes.
# TYPE kubevirt_vmi_network_receive_bytes_total counter
kubevirt_vmi_network_receive_bytes_total{interface="default",name="vm1",namespace="default",node="n1"} 1024
kubevirt_vmi_network_receive_bytes_total{interface="lan",name="vm1",namespace="default",node="n1"} 976
kubevirt_vmi_network_receive_bytes_total{interface="default",name="vm1",namespace="other",node="n1"} 5
kubevirt_vmi_network_receive_bytes_total{interface="default",name="vm2",namespace="default",node="n1"} 7
kubevirt_vmi_storage_read_traffic_bytes_total{drive="vda",name="vm1",namespace="default"} 1.5e6 1700000000000
weird{path="C:\\\\dir",msg="say \\"hi\\"\\nbye"} +Inf
no_labels 3
up{} NaN
metric_with_spaces { a = "1" , b="2", } 4
bad line here
`;

describe('parsePrometheusText', () => {
  const samples = parsePrometheusText(TEXT);

  it('reads names, labels, values and timestamps', () => {
    const read = samples.find((s) => s.name === 'kubevirt_vmi_storage_read_traffic_bytes_total');
    expect(read).toEqual({
      name: 'kubevirt_vmi_storage_read_traffic_bytes_total',
      labels: { drive: 'vda', name: 'vm1', namespace: 'default' },
      value: 1.5e6,
      timestampMs: 1700000000000,
    });
    expect(samples.find((s) => s.name === 'no_labels')?.value).toBe(3);
    expect(samples.find((s) => s.name === 'up')?.value).toBeNaN();
  });

  it('unescapes label values', () => {
    const w = samples.find((s) => s.name === 'weird');
    expect(w?.labels).toEqual({ path: 'C:\\dir', msg: 'say "hi"\nbye' });
    expect(w?.value).toBe(Infinity);
  });

  it('tolerates spaces and a trailing comma in label sets', () => {
    expect(samples.find((s) => s.name === 'metric_with_spaces')?.labels).toEqual({ a: '1', b: '2' });
  });

  it('skips comments and malformed lines', () => {
    expect(samples.some((s) => s.name === 'bad')).toBe(false);
    expect(samples).toHaveLength(9);
  });

  it('sums the samples that match labels', () => {
    expect(sumSamples(samples, 'kubevirt_vmi_network_receive_bytes_total', { name: 'vm1', namespace: 'default' })).toBe(2000);
    expect(sumSamples(samples, 'kubevirt_vmi_network_receive_bytes_total', { name: 'nope' })).toBeUndefined();
  });
});

describe('counterRate', () => {
  it('divides the increase by the interval', () => {
    expect(counterRate(100, 300, 10)).toBe(20);
  });
  it('counts from zero after a reset', () => {
    expect(counterRate(1000, 50, 10)).toBe(5);
  });
  it('has no rate without two readings', () => {
    expect(counterRate(undefined, 5, 10)).toBeNull();
    expect(counterRate(1, 5, 0)).toBeNull();
  });
});
