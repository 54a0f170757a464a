import { describe, expect, it } from 'vitest';
import { parsePrometheusText } from '../api/metricsText';
import { progressFromMetrics, transferSummary } from './liveProgress';

const scrape = (lines: string[]) => parsePrometheusText(lines.join('\n') + '\n');
const vmi = 'node="n1",namespace="default",name="vm1"';

describe('live migration progress', () => {
  it('is the share of guest memory no longer left to send', () => {
    const samples = scrape([
      `kubevirt_vmi_migration_data_bytes_total{${vmi}} 1000`,
      `kubevirt_vmi_migration_data_processed_bytes{${vmi}} 900`,
      `kubevirt_vmi_migration_data_remaining_bytes{${vmi}} 250`,
    ]);
    expect(progressFromMetrics(samples, 'default', 'vm1')).toBe(75);
  });

  it('falls back to processed / (processed + remaining) without a total', () => {
    const samples = scrape([
      `kubevirt_vmi_migration_data_processed_bytes{${vmi}} 30`,
      `kubevirt_vmi_migration_data_remaining_bytes{${vmi}} 10`,
    ]);
    expect(progressFromMetrics(samples, 'default', 'vm1')).toBe(75);
  });

  it('is unknown for a VMI the node reports no migration of', () => {
    const samples = scrape([
      `kubevirt_vmi_migration_data_remaining_bytes{node="n1",namespace="default",name="other"} 10`,
      `kubevirt_vmi_cpu_usage_seconds_total{${vmi}} 3`,
    ]);
    expect(progressFromMetrics(samples, 'default', 'vm1')).toBeUndefined();
    expect(progressFromMetrics(samples, 'other-ns', 'other')).toBeUndefined();
  });

  it('never goes below 0 or above 100', () => {
    const samples = scrape([
      `kubevirt_vmi_migration_data_bytes_total{${vmi}} 100`,
      `kubevirt_vmi_migration_data_remaining_bytes{${vmi}} 150`,
    ]);
    expect(progressFromMetrics(samples, 'default', 'vm1')).toBe(0);
  });

  it('sums up what a finished migration moved', () => {
    const transfer = { totalTimeMilliseconds: 1234, downtimeMilliseconds: 33, memoryBytes: 24 * 1024 * 1024, diskBytes: 0 };
    expect(transferSummary({ completed: true, transfer })).toBe('24 MiB in 1.2 s, downtime 33 ms');
    expect(transferSummary({ completed: true, failed: true, transfer })).toBeUndefined();
    expect(transferSummary({ completed: false, transfer })).toBeUndefined();
  });
});
