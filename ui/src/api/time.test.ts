import { describe, expect, it } from 'vitest';
import { formatAge } from './time';

const now = Date.parse('2024-06-01T12:00:00Z');
const ago = (s: number) => new Date(now - s * 1000).toISOString();

describe('formatAge', () => {
  it.each([
    [5, '5s'],
    [119, '119s'],
    [150, '2m30s'],
    [600, '10m'],
    [3 * 3600 + 5 * 60, '3h5m'],
    [30 * 3600, '30h'],
    [3 * 86400 + 4 * 3600, '3d4h'],
    [40 * 86400, '40d'],
    [800 * 86400, '2y70d'],
  ])('%ss', (s, want) => {
    expect(formatAge(ago(s), now)).toBe(want);
  });
  it('handles missing and future times', () => {
    expect(formatAge(undefined, now)).toBe('—');
    expect(formatAge(ago(-10), now)).toBe('0s');
  });
});
