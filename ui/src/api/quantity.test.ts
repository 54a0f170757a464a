import { describe, expect, it } from 'vitest';
import { formatBytes, formatCores, isQuantity, parseQuantity } from './quantity';

describe('parseQuantity', () => {
  it.each([
    ['1500000n', 0.0015],
    ['12m', 0.012],
    ['2', 2],
    ['0.5', 0.5],
    ['256Mi', 256 * 2 ** 20],
    ['123456Ki', 123456 * 1024],
    ['1Gi', 2 ** 30],
    ['1G', 1e9],
    ['1.5k', 1500],
    ['1e3', 1000],
    ['2E2', 200],
    ['100u', 1e-4],
  ])('%s', (q, v) => {
    expect(parseQuantity(q)).toBeCloseTo(v, 12);
  });

  it('rejects what is not a quantity', () => {
    expect(parseQuantity('abc')).toBeNaN();
    expect(parseQuantity('12 Mi')).toBeNaN();
    expect(parseQuantity('')).toBeNaN();
    expect(parseQuantity(undefined)).toBeNaN();
    expect(isQuantity('256Mi')).toBe(true);
    expect(isQuantity('256MB')).toBe(false);
  });
});

describe('formatting', () => {
  it('formats bytes in binary units', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(256 * 2 ** 20)).toBe('256 MiB');
    expect(formatBytes(NaN)).toBe('—');
  });
  it('formats cores the kubectl way', () => {
    expect(formatCores(0.012)).toBe('12m');
    expect(formatCores(0.0015)).toBe('1.5m');
    expect(formatCores(2)).toBe('2');
    expect(formatCores(1.256)).toBe('1.26');
  });
});
