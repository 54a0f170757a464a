// An API error as an inline alert: the Status message and each field cause.
import { Alert, List, ListItem } from '@patternfly/react-core';
import { ApiError } from '../api/status';

export function causeList(err: unknown) {
  if (!(err instanceof ApiError) || err.causes.length === 0) return null;
  return (
    <List aria-label="Field errors">
      {err.causes.map((c, i) => (
        <ListItem key={i}>
          {c.field ? <code>{c.field}</code> : null}
          {c.field ? ': ' : null}
          {c.message}
        </ListItem>
      ))}
    </List>
  );
}

export function ErrorAlert({ error, title, isInline = true }: { error: unknown; title?: string; isInline?: boolean }) {
  if (!error) return null;
  const message = error instanceof Error ? error.message : String(error);
  return (
    <Alert variant="danger" isInline={isInline} title={title ?? message} role="alert">
      {title ? <p>{message}</p> : null}
      {causeList(error)}
    </Alert>
  );
}
