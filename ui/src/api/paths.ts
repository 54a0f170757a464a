// URL builders for the API paths the console uses.

export const KUBEVIRT = '/apis/kubevirt.io/v1';
export const SUBRESOURCES = '/apis/subresources.kubevirt.io/v1';
export const CDI = '/apis/cdi.kubevirt.io/v1beta1';

const enc = encodeURIComponent;

function scoped(base: string, resource: string, namespace?: string): string {
  return namespace ? `${base}/namespaces/${enc(namespace)}/${resource}` : `${base}/${resource}`;
}

export const paths = {
  vms: (ns?: string) => scoped(KUBEVIRT, 'virtualmachines', ns),
  vm: (ns: string, name: string) => `${scoped(KUBEVIRT, 'virtualmachines', ns)}/${enc(name)}`,
  vmis: (ns?: string) => scoped(KUBEVIRT, 'virtualmachineinstances', ns),
  vmims: (ns?: string) => scoped(KUBEVIRT, 'virtualmachineinstancemigrations', ns),
  vmim: (ns: string, name: string) => `${scoped(KUBEVIRT, 'virtualmachineinstancemigrations', ns)}/${enc(name)}`,
  vmAction: (ns: string, name: string, action: string) =>
    `${scoped(SUBRESOURCES, 'virtualmachines', ns)}/${enc(name)}/${action}`,
  vmiAction: (ns: string, name: string, action: string) =>
    `${scoped(SUBRESOURCES, 'virtualmachineinstances', ns)}/${enc(name)}/${action}`,
  nodes: () => '/api/v1/nodes',
  node: (name: string) => `/api/v1/nodes/${enc(name)}`,
  nodeMetrics: (name: string) => `/api/v1/nodes/${enc(name)}/proxy/metrics`,
  namespaces: () => '/api/v1/namespaces',
  events: (ns: string) => `/api/v1/namespaces/${enc(ns)}/events`,
  dvs: (ns?: string) => scoped(CDI, 'datavolumes', ns),
  dv: (ns: string, name: string) => `${scoped(CDI, 'datavolumes', ns)}/${enc(name)}`,
  podMetrics: (ns: string) => `/apis/metrics.k8s.io/v1beta1/namespaces/${enc(ns)}/pods`,
  uploadTokenRequests: (ns: string) =>
    `/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/${enc(ns)}/uploadtokenrequests`,
  upload: () => '/v1beta1/upload',
  ssar: () => '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews',
};

/** ws:// or wss:// URL of a VMI console/vnc subresource on this origin. */
export function consoleSocketUrl(
  ns: string,
  name: string,
  kind: 'console' | 'vnc',
  loc: { protocol: string; host: string } = window.location,
): string {
  const scheme = loc.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${scheme}//${loc.host}${paths.vmiAction(ns, name, kind)}`;
}

/** A list path narrowed to one object by name (the watch still works on it). */
export function byName(listPath: string, name: string): string {
  return `${listPath}?fieldSelector=${enc(`metadata.name=${name}`)}`;
}
