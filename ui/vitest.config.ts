import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    environment: 'jsdom',
    include: ['src/**/*.test.{ts,tsx}'],
    // The machine is shared: two workers are plenty for these small suites.
    maxWorkers: 2,
  },
});
