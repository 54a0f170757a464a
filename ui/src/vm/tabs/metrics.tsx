// Metrics: CPU and memory from metrics.k8s.io every 10 s while the tab is open; network
// and disk rates from the node's /metrics when the user may read it.
import { Alert, Content, Grid, GridItem, Title } from '@patternfly/react-core';
import { useEffect, useState } from 'react';
import { api, rawRequest, withQuery } from '../../api/client';
import { parsePrometheusText } from '../../api/metricsText';
import { paths } from '../../api/paths';
import { formatBytes, formatCores } from '../../api/quantity';
import { can } from '../../api/ssar';
import type { KubeList, PodMetrics, VirtualMachineInstance } from '../../api/types';
import { TimeChart } from '../../charts/TimeChart';
import { useAccess } from '../../state/access';
import { getHistory, pushPoint, podUsage, setHistory, vmCounters, type Counters } from '../metricsHistory';

const POLL_MS = 10_000;
const BLUE = '#0066cc';
const ORANGE = '#ec7a08';

export function MetricsTab({ namespace, name, vmi }: { namespace: string; name: string; vmi?: VirtualMachineInstance }) {
  const key = `${namespace}/${name}`;
  const node = vmi?.status?.nodeName;
  const nodeAllowed = useAccess(node ? can.nodeProxy(node) : null);
  const [history, setH] = useState(() => getHistory(key));
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    let live = true;
    const tick = async () => {
      const podPath = withQuery(paths.podMetrics(namespace), { labelSelector: `kubevirt.io/domain=${name}` });
      const [pods, scrape] = await Promise.allSettled([
        api.get<KubeList<PodMetrics>>(podPath),
        node && nodeAllowed ? rawRequest('GET', paths.nodeMetrics(node)).then((r) => r.text()) : Promise.resolve(null),
      ]);
      if (!live) return;
      const usage = pods.status === 'fulfilled' ? podUsage(pods.value?.items ?? []) : { cpu: null, memory: null };
      let counters: Counters | null = null;
      if (scrape.status === 'fulfilled' && scrape.value) counters = vmCounters(parsePrometheusText(scrape.value), namespace, name);
      setError(pods.status === 'rejected' ? (pods.reason as Error).message : null);
      const next = pushPoint(getHistory(key), Date.now() / 1000, usage, counters);
      setHistory(key, next);
      setH(next);
    };
    void tick();
    const t = setInterval(() => void tick(), POLL_MS);
    return () => {
      live = false;
      clearInterval(t);
    };
  }, [key, namespace, name, node, nodeAllowed]);

  const running = vmi?.status?.phase === 'Running';
  return (
    <>
      {!running ? <Alert variant="info" isInline isPlain title="The virtual machine is not running: no new readings." /> : null}
      {error ? <Alert variant="warning" isInline title="Cannot read pod metrics">{error}</Alert> : null}
      <Content component="small">One reading every 10 seconds while this tab is open; {history.t.length} so far.</Content>
      <Grid hasGutter md={6}>
        <GridItem>
          <Title headingLevel="h3" size="md">
            CPU
          </Title>
          <TimeChart title="CPU usage" times={history.t} series={[{ label: 'CPU (cores)', color: BLUE, values: history.cpu }]} format={formatCores} />
        </GridItem>
        <GridItem>
          <Title headingLevel="h3" size="md">
            Memory
          </Title>
          <TimeChart title="Memory usage" times={history.t} series={[{ label: 'Memory', color: BLUE, values: history.memory }]} format={formatBytes} />
        </GridItem>
        {nodeAllowed ? (
          <>
            <GridItem>
              <Title headingLevel="h3" size="md">
                Network
              </Title>
              <TimeChart
                title="Network traffic"
                times={history.t}
                series={[
                  { label: 'Received/s', color: BLUE, values: history.rx },
                  { label: 'Sent/s', color: ORANGE, values: history.tx },
                ]}
                format={(v) => `${formatBytes(v)}/s`}
              />
            </GridItem>
            <GridItem>
              <Title headingLevel="h3" size="md">
                Storage
              </Title>
              <TimeChart
                title="Storage traffic"
                times={history.t}
                series={[
                  { label: 'Read/s', color: BLUE, values: history.read },
                  { label: 'Written/s', color: ORANGE, values: history.write },
                ]}
                format={(v) => `${formatBytes(v)}/s`}
              />
            </GridItem>
          </>
        ) : node && nodeAllowed === false ? (
          <GridItem>
            <Content component="small">Network and storage charts need permission to read the node's metrics (nodes/proxy).</Content>
          </GridItem>
        ) : null}
      </Grid>
    </>
  );
}
