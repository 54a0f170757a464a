// What a table shows instead of rows: loading, an error, or nothing found.
import { Bullseye, EmptyState, EmptyStateBody, Spinner } from '@patternfly/react-core';
import { Td, Tr } from '@patternfly/react-table';
import type { ReactNode } from 'react';

export function TableMessageRow({ colSpan, children }: { colSpan: number; children: ReactNode }) {
  return (
    <Tr>
      <Td colSpan={colSpan}>
        <Bullseye>{children}</Bullseye>
      </Td>
    </Tr>
  );
}

export function LoadingRow({ colSpan, count }: { colSpan: number; count?: number }) {
  return (
    <TableMessageRow colSpan={colSpan}>
      <Spinner size="lg" aria-label="Loading" />
      {count ? <span style={{ marginLeft: 8 }}>{count.toLocaleString()} loaded…</span> : null}
    </TableMessageRow>
  );
}

export function EmptyRow({ colSpan, title, children }: { colSpan: number; title: string; children?: ReactNode }) {
  return (
    <TableMessageRow colSpan={colSpan}>
      <EmptyState titleText={title} headingLevel="h2" variant="sm">
        {children ? <EmptyStateBody>{children}</EmptyStateBody> : null}
      </EmptyState>
    </TableMessageRow>
  );
}
