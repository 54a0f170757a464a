// Connection state and buttons above a console.
import { Button, Flex, FlexItem, Label } from '@patternfly/react-core';
import type { ReactNode } from 'react';

export type ConnState = 'connecting' | 'connected' | 'disconnected';

export function ConnectionBar({
  state,
  detail,
  onReconnect,
  children,
}: {
  state: ConnState;
  detail?: string;
  onReconnect: () => void;
  children?: ReactNode;
}) {
  const label =
    state === 'connected' ? (
      <Label color="green">Connected</Label>
    ) : state === 'connecting' ? (
      <Label color="blue">Connecting…</Label>
    ) : (
      <Label color="red">Disconnected</Label>
    );
  return (
    <Flex spaceItems={{ default: 'spaceItemsSm' }} alignItems={{ default: 'alignItemsCenter' }} flexWrap={{ default: 'wrap' }} style={{ marginBottom: 8 }}>
      <FlexItem role="status">{label}</FlexItem>
      {state === 'disconnected' && detail ? <FlexItem>{detail}</FlexItem> : null}
      {state === 'disconnected' ? (
        <FlexItem>
          <Button variant="primary" size="sm" onClick={onReconnect}>
            Reconnect
          </Button>
        </FlexItem>
      ) : null}
      {children}
    </Flex>
  );
}
