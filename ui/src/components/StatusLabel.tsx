import { Label } from '@patternfly/react-core';
import { statusColor } from '../vm/vmState';

/** A colored label for a phase or printable status. */
export function StatusLabel({ status, compact = true }: { status: string; compact?: boolean }) {
  return (
    <Label color={statusColor(status)} isCompact={compact}>
      {status}
    </Label>
  );
}
