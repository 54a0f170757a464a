import { Progress, ProgressMeasureLocation, ProgressSize, ProgressVariant } from '@patternfly/react-core';

/** A compact progress bar with one decimal ("45.2%"); `failed`/`done` color it. */
export function ProgressCell({ value, label, failed, done }: { value: number; label: string; failed?: boolean; done?: boolean }) {
  const text = `${Number(value.toFixed(1))}%`;
  return (
    <div style={{ minWidth: '9rem' }}>
      <Progress
        value={value}
        label={text}
        valueText={text}
        size={ProgressSize.sm}
        measureLocation={ProgressMeasureLocation.outside}
        variant={failed ? ProgressVariant.danger : done ? ProgressVariant.success : undefined}
        aria-label={label}
      />
    </div>
  );
}
