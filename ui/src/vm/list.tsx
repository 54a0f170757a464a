// The VM list: every VM (joined with its VMI for node and IP), live through watches,
// filtered and paginated on the client so 10,000 rows stay quick.
import {
  Alert,
  FormSelect,
  FormSelectOption,
  HelperText,
  HelperTextItem,
  PageSection,
  Pagination,
  SearchInput,
  TextInput,
  Title,
  Toolbar,
  ToolbarContent,
  ToolbarGroup,
  ToolbarItem,
} from '@patternfly/react-core';
import { Table, Tbody, Td, Th, Thead, Tr, type ThProps } from '@patternfly/react-table';
import { useDeferredValue, useEffect, useMemo, useState } from 'react';
import { paths } from '../api/paths';
import { can } from '../api/ssar';
import type { VirtualMachine, VirtualMachineInstance } from '../api/types';
import { href, Link, navigate } from '../app/router';
import { Age, useNow } from '../components/Age';
import { ErrorAlert } from '../components/ErrorAlert';
import { GatedButton } from '../components/GatedButton';
import { EmptyRow, LoadingRow } from '../components/ListState';
import { NamespaceSelect } from '../components/NamespaceSelect';
import { StatusLabel } from '../components/StatusLabel';
import { useAccessAll } from '../state/access';
import { useList } from '../state/informers';
import { useNotify } from '../state/notify';
import { FALLBACK_NAMESPACE, useScopedList } from '../state/scoped';
import { runBounded, vmActions } from './actions';
import {
  distinct,
  filterRows,
  joinRows,
  NO_FILTER,
  sortRows,
  vmIp,
  vmNode,
  vmStatus,
  type SortColumn,
  type VmFilter,
} from './filter';

const COLUMNS: { key: SortColumn | 'ip'; label: string }[] = [
  { key: 'name', label: 'Name' },
  { key: 'namespace', label: 'Namespace' },
  { key: 'status', label: 'Status' },
  { key: 'node', label: 'Node' },
  { key: 'ip', label: 'IP' },
  { key: 'age', label: 'Age' },
];

export function VmListPage() {
  const vms = useScopedList<VirtualMachine>(paths.vms);
  const namespace = vms.namespace;
  const vmis = useList<VirtualMachineInstance>(paths.vmis(namespace || undefined));
  const notify = useNotify();
  const now = useNow();

  const [filter, setFilter] = useState<VmFilter>(NO_FILTER);
  // Typing stays responsive while 10,000 rows re-filter in the background.
  const deferredFilter = useDeferredValue(filter);
  const [sort, setSort] = useState<{ column: SortColumn; direction: 'asc' | 'desc' }>({ column: 'name', direction: 'asc' });
  const [page, setPage] = useState(1);
  const [perPage, setPerPage] = useState(50);
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [bulkBusy, setBulkBusy] = useState<'' | 'start' | 'stop'>('');

  const allRows = useMemo(() => joinRows(vms.items, vmis.items), [vms.items, vmis.items]);
  const { rows: filtered, selectorError } = useMemo(() => filterRows(allRows, deferredFilter), [allRows, deferredFilter]);
  const sorted = useMemo(() => sortRows(filtered, sort.column, sort.direction), [filtered, sort]);
  const nodes = useMemo(() => distinct(allRows, vmNode), [allRows]);
  const phases = useMemo(() => distinct(allRows, (r) => vmStatus(r.vm)), [allRows]);

  const pageCount = Math.max(1, Math.ceil(sorted.length / perPage));
  const currentPage = Math.min(page, pageCount);
  const visible = sorted.slice((currentPage - 1) * perPage, currentPage * perPage);

  // A filter change goes back to page 1.
  useEffect(() => setPage(1), [deferredFilter, namespace]);
  // Selections of VMs that are gone are dropped.
  useEffect(() => {
    setSelected((s) => {
      if ([...s].every((k) => vms.items.has(k))) return s;
      return new Set([...s].filter((k) => vms.items.has(k)));
    });
  }, [vms.items]);

  const selectedRows = useMemo(() => allRows.filter((r) => selected.has(r.key)), [allRows, selected]);
  const selectedNamespaces = useMemo(
    () => [...new Set(selectedRows.map((r) => r.vm.metadata.namespace ?? ''))],
    [selectedRows],
  );
  const canStartAll = useAccessAll(selectedNamespaces.map((ns) => ({ ...can.vmAction(ns, '', 'start'), name: undefined })));
  const canStopAll = useAccessAll(selectedNamespaces.map((ns) => ({ ...can.vmAction(ns, '', 'stop'), name: undefined })));

  const bulk = async (action: 'start' | 'stop') => {
    const targets = selectedRows;
    setBulkBusy(action);
    const failures = await runBounded(targets, 8, (r) =>
      vmActions[action](r.vm.metadata.namespace ?? '', r.vm.metadata.name ?? ''),
    );
    setBulkBusy('');
    const verb = action === 'start' ? 'Start' : 'Stop';
    if (failures.length === 0) {
      notify('success', `${verb} requested for ${targets.length} virtual machine${targets.length === 1 ? '' : 's'}`);
      setSelected(new Set());
    } else {
      notify(
        'danger',
        `${verb} failed for ${failures.length} of ${targets.length}`,
        <ul>
          {failures.slice(0, 10).map((f) => (
            <li key={f.item.key}>
              {f.item.key}: {f.error instanceof Error ? f.error.message : String(f.error)}
            </li>
          ))}
        </ul>,
      );
    }
  };

  const sortParams = (column: SortColumn, index: number): ThProps['sort'] => ({
    sortBy: { index: COLUMNS.findIndex((c) => c.key === sort.column), direction: sort.direction },
    onSort: (_e, _i, direction) => setSort({ column, direction }),
    columnIndex: index,
  });

  const pageKeys = visible.map((r) => r.key);
  const allOnPageSelected = pageKeys.length > 0 && pageKeys.every((k) => selected.has(k));
  const toggle = (key: string, on: boolean) =>
    setSelected((s) => {
      const n = new Set(s);
      if (on) n.add(key);
      else n.delete(key);
      return n;
    });

  const createNs = namespace || FALLBACK_NAMESPACE;
  const pagination = (variant: 'top' | 'bottom') => (
    <Pagination
      itemCount={sorted.length}
      perPage={perPage}
      page={currentPage}
      onSetPage={(_e, p) => setPage(p)}
      onPerPageSelect={(_e, pp) => {
        setPerPage(pp);
        setPage(1);
      }}
      perPageOptions={[
        { title: '50', value: 50 },
        { title: '100', value: 100 },
      ]}
      variant={variant}
      isCompact={variant === 'top'}
      titles={{ paginationAriaLabel: `Virtual machines pagination (${variant})` }}
    />
  );

  return (
    <>
      <PageSection>
        <Title headingLevel="h1">Virtual machines</Title>
      </PageSection>
      <PageSection>
        <Toolbar aria-label="Virtual machine filters and actions">
          <ToolbarContent>
            <ToolbarGroup variant="filter-group" className="vp-toolbar-wrap">
              <ToolbarItem>
                <NamespaceSelect />
              </ToolbarItem>
              <ToolbarItem>
                <SearchInput
                  aria-label="Filter by name"
                  placeholder="Filter by name"
                  value={filter.name}
                  onChange={(_e, v) => setFilter((f) => ({ ...f, name: v }))}
                  onClear={() => setFilter((f) => ({ ...f, name: '' }))}
                />
              </ToolbarItem>
              <ToolbarItem>
                <TextInput
                  aria-label="Filter by label"
                  placeholder="Filter by label (app=web,tier!=db)"
                  value={filter.labelSelector}
                  validated={selectorError ? 'error' : 'default'}
                  onChange={(_e, v) => setFilter((f) => ({ ...f, labelSelector: v }))}
                />
              </ToolbarItem>
              <ToolbarItem>
                <FormSelect
                  aria-label="Filter by node"
                  value={filter.node}
                  onChange={(_e, v) => setFilter((f) => ({ ...f, node: v }))}
                >
                  <FormSelectOption value="" label="All nodes" />
                  {nodes.map((n) => (
                    <FormSelectOption key={n} value={n} label={n} />
                  ))}
                </FormSelect>
              </ToolbarItem>
              <ToolbarItem>
                <FormSelect
                  aria-label="Filter by phase"
                  value={filter.phase}
                  onChange={(_e, v) => setFilter((f) => ({ ...f, phase: v }))}
                >
                  <FormSelectOption value="" label="All statuses" />
                  {phases.map((p) => (
                    <FormSelectOption key={p} value={p} label={p} />
                  ))}
                </FormSelect>
              </ToolbarItem>
            </ToolbarGroup>
            <ToolbarGroup variant="action-group">
              <ToolbarItem>
                <GatedButton
                  variant="secondary"
                  attrs={null}
                  applicable={selected.size > 0 && canStartAll === true}
                  notApplicableReason={
                    selected.size === 0 ? 'Select virtual machines first.' : canStartAll === false ? 'You are not allowed to start all of the selected virtual machines.' : ''
                  }
                  busy={bulkBusy === 'start'}
                  onClick={() => void bulk('start')}
                >
                  Start
                </GatedButton>
              </ToolbarItem>
              <ToolbarItem>
                <GatedButton
                  variant="secondary"
                  attrs={null}
                  applicable={selected.size > 0 && canStopAll === true}
                  notApplicableReason={
                    selected.size === 0 ? 'Select virtual machines first.' : canStopAll === false ? 'You are not allowed to stop all of the selected virtual machines.' : ''
                  }
                  busy={bulkBusy === 'stop'}
                  onClick={() => void bulk('stop')}
                >
                  Stop
                </GatedButton>
              </ToolbarItem>
              <ToolbarItem>
                <GatedButton variant="primary" attrs={can.createVm(createNs)} onClick={() => navigate(href.vmNew(createNs))}>
                  Create VirtualMachine
                </GatedButton>
              </ToolbarItem>
            </ToolbarGroup>
            <ToolbarItem variant="pagination" align={{ default: 'alignEnd' }} visibility={{ default: 'hidden', md: 'visible' }}>
              {pagination('top')}
            </ToolbarItem>
          </ToolbarContent>
        </Toolbar>
        {selectorError ? (
          <HelperText>
            <HelperTextItem variant="error">{selectorError}</HelperTextItem>
          </HelperText>
        ) : null}
        {vms.error && !vms.fatal ? (
          <Alert variant="warning" isInline isPlain title={`The live view lost its connection; retrying (${vms.error.message})`} />
        ) : null}
        {vms.fatal && vms.error ? <ErrorAlert error={vms.error} title="Cannot list virtual machines" /> : null}
        <Table aria-label="Virtual machines" isStickyHeader gridBreakPoint="grid-md" variant="compact">
          <Thead>
            <Tr>
              <Th
                select={{
                  onSelect: (_e, on) =>
                    setSelected((s) => {
                      const n = new Set(s);
                      for (const k of pageKeys) {
                        if (on) n.add(k);
                        else n.delete(k);
                      }
                      return n;
                    }),
                  isSelected: allOnPageSelected,
                }}
                aria-label="Select all on this page"
              />
              {COLUMNS.map((c, i) => (
                <Th key={c.key} modifier="nowrap" sort={c.key === 'ip' ? undefined : sortParams(c.key as SortColumn, i)}>
                  {c.label}
                </Th>
              ))}
            </Tr>
          </Thead>
          <Tbody>
            {!vms.loaded && visible.length === 0 ? (
              <LoadingRow colSpan={7} count={vms.items.size} />
            ) : visible.length === 0 ? (
              <EmptyRow colSpan={7} title={allRows.length === 0 ? 'No virtual machines' : 'No virtual machines match the filters'}>
                {allRows.length === 0 ? 'Create one with the "Create VirtualMachine" button.' : null}
              </EmptyRow>
            ) : (
              visible.map((r, rowIndex) => {
                const ns = r.vm.metadata.namespace ?? '';
                const name = r.vm.metadata.name ?? '';
                return (
                  <Tr key={r.key}>
                    <Td
                      select={{
                        rowIndex,
                        onSelect: (_e, on) => toggle(r.key, on),
                        isSelected: selected.has(r.key),
                      }}
                      aria-label={`Select ${name}`}
                    />
                    <Td dataLabel="Name">
                      <Link to={href.vm(ns, name)}>{name}</Link>
                    </Td>
                    <Td dataLabel="Namespace">{ns}</Td>
                    <Td dataLabel="Status">
                      <StatusLabel status={vmStatus(r.vm)} />
                    </Td>
                    <Td dataLabel="Node">{vmNode(r) || '—'}</Td>
                    <Td dataLabel="IP" className="vp-mono">
                      {vmIp(r.vmi) || '—'}
                    </Td>
                    <Td dataLabel="Age">
                      <Age timestamp={r.vm.metadata.creationTimestamp} now={now} />
                    </Td>
                  </Tr>
                );
              })
            )}
          </Tbody>
        </Table>
        {pagination('bottom')}
      </PageSection>
    </>
  );
}
