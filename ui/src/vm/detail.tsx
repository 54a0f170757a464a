// One VM: header, actions and the tabs, all live through watches narrowed to its name.
import {
  Breadcrumb,
  BreadcrumbItem,
  Bullseye,
  EmptyState,
  EmptyStateBody,
  Flex,
  FlexItem,
  PageSection,
  Spinner,
  Tab,
  Tabs,
  TabTitleText,
  Title,
} from '@patternfly/react-core';
import { byName, paths } from '../api/paths';
import type { VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceMigration } from '../api/types';
import { href, Link, navigate } from '../app/router';
import { ErrorAlert } from '../components/ErrorAlert';
import { StatusLabel } from '../components/StatusLabel';
import { useList } from '../state/informers';
import { ConsoleTab } from '../console/ConsoleTab';
import { ActionsBar } from './ActionsBar';
import { vmStatus } from './filter';
import { DisksTab } from './tabs/disks';
import { EventsTab } from './tabs/events';
import { MetricsTab } from './tabs/metrics';
import { MigrationsTab } from './tabs/migrations';
import { NetworkTab } from './tabs/network';
import { OverviewTab } from './tabs/overview';
import { YamlTab } from './tabs/yaml';
import { activeMigration } from './vmState';

const TABS = ['overview', 'yaml', 'events', 'disks', 'network', 'migrations', 'metrics', 'console'] as const;
type TabKey = (typeof TABS)[number];

export function VmDetailPage({ namespace, name, tab }: { namespace: string; name: string; tab?: string }) {
  const key = `${namespace}/${name}`;
  const vms = useList<VirtualMachine>(byName(paths.vms(namespace), name));
  const vmis = useList<VirtualMachineInstance>(byName(paths.vmis(namespace), name));
  const migrations = useList<VirtualMachineInstanceMigration>(paths.vmims(namespace));
  const vm = vms.items.get(key);
  const vmi = vmis.items.get(key);
  const migration = activeMigration(migrations.items.values(), name, namespace);
  const active: TabKey = (TABS as readonly string[]).includes(tab ?? '') ? (tab as TabKey) : 'overview';

  const breadcrumb = (
    <Breadcrumb>
      <BreadcrumbItem>
        <Link to={href.vms()}>Virtual machines</Link>
      </BreadcrumbItem>
      <BreadcrumbItem isActive>{name}</BreadcrumbItem>
    </Breadcrumb>
  );

  if (!vm) {
    return (
      <PageSection>
        {breadcrumb}
        <Title headingLevel="h1">{name}</Title>
        {vms.fatal && vms.error ? (
          <ErrorAlert error={vms.error} title="Cannot read this virtual machine" />
        ) : !vms.loaded ? (
          <Bullseye>
            <Spinner aria-label="Loading" />
          </Bullseye>
        ) : (
          <EmptyState titleText="Not found" headingLevel="h2">
            <EmptyStateBody>
              There is no virtual machine {name} in namespace {namespace} (it may have been deleted).
            </EmptyStateBody>
          </EmptyState>
        )}
      </PageSection>
    );
  }

  const status = vmStatus(vm);
  return (
    <>
      <PageSection>
        {breadcrumb}
        <Flex alignItems={{ default: 'alignItemsCenter' }} spaceItems={{ default: 'spaceItemsMd' }}>
          <FlexItem>
            <Title headingLevel="h1">{name}</Title>
          </FlexItem>
          <FlexItem>
            <StatusLabel status={status} compact={false} />
          </FlexItem>
          <FlexItem>
            <span className="pf-v6-u-color-200">Namespace {namespace}</span>
          </FlexItem>
        </Flex>
      </PageSection>
      <PageSection>
        <ActionsBar vm={vm} vmi={vmi} migration={migration} />
      </PageSection>
      <PageSection>
        <Tabs
          activeKey={active}
          onSelect={(_e, k) => navigate(href.vm(namespace, name, k === 'overview' ? undefined : String(k)), { replace: true })}
          aria-label="Virtual machine details"
          mountOnEnter
          unmountOnExit
        >
          <Tab eventKey="overview" title={<TabTitleText>Overview</TabTitleText>}>
            <OverviewTab vm={vm} vmi={vmi} />
          </Tab>
          <Tab eventKey="yaml" title={<TabTitleText>YAML</TabTitleText>}>
            <YamlTab vm={vm} />
          </Tab>
          <Tab eventKey="events" title={<TabTitleText>Events</TabTitleText>}>
            <EventsTab namespace={namespace} name={name} />
          </Tab>
          <Tab eventKey="disks" title={<TabTitleText>Disks</TabTitleText>}>
            <DisksTab vm={vm} />
          </Tab>
          <Tab eventKey="network" title={<TabTitleText>Network</TabTitleText>}>
            <NetworkTab vm={vm} vmi={vmi} />
          </Tab>
          <Tab eventKey="migrations" title={<TabTitleText>Migrations</TabTitleText>}>
            <MigrationsTab vmi={vmi} name={name} migrations={[...migrations.items.values()]} />
          </Tab>
          <Tab eventKey="metrics" title={<TabTitleText>Metrics</TabTitleText>}>
            <MetricsTab namespace={namespace} name={name} vmi={vmi} />
          </Tab>
          <Tab eventKey="console" title={<TabTitleText>Console</TabTitleText>}>
            <ConsoleTab namespace={namespace} name={name} vmi={vmi} />
          </Tab>
        </Tabs>
      </PageSection>
    </>
  );
}
