// A button that is enabled only when the user may do its action and the action fits
// the object's state; otherwise it stays visible, disabled, with a tooltip saying why.
import { Button, Tooltip, type ButtonProps } from '@patternfly/react-core';
import { gate, type ResourceAttributes } from '../api/ssar';
import { useAccess } from '../state/access';

export interface GatedButtonProps extends Omit<ButtonProps, 'isDisabled' | 'isAriaDisabled'> {
  attrs: ResourceAttributes | null;
  applicable?: boolean;
  notApplicableReason?: string;
  busy?: boolean;
}

export function GatedButton({
  attrs,
  applicable = true,
  notApplicableReason = '',
  busy = false,
  children,
  ...rest
}: GatedButtonProps) {
  const allowed = useAccess(attrs);
  const g = gate(attrs, allowed, applicable, notApplicableReason);
  const disabled = g.disabled || busy;
  // aria-disabled (not `disabled`) keeps the button focusable so the tooltip can show.
  const button = (
    <Button {...rest} isAriaDisabled={disabled} isLoading={busy || undefined}>
      {children}
    </Button>
  );
  return g.reason ? <Tooltip content={g.reason}>{button}</Tooltip> : button;
}
