// Permission checks through SelfSubjectAccessReview, cached per attribute set for the
// session, and the rule that turns an answer into a button's state.
import { api, } from './client';
import { paths } from './paths';

export interface ResourceAttributes {
  group?: string;
  resource: string;
  subresource?: string;
  verb: string;
  namespace?: string;
  name?: string;
}

export function attrsKey(a: ResourceAttributes): string {
  return [a.verb, a.group ?? '', a.resource, a.subresource ?? '', a.namespace ?? '', a.name ?? ''].join('|');
}

interface SelfSubjectAccessReview {
  status?: { allowed?: boolean; denied?: boolean; reason?: string };
}

export type Reviewer = (a: ResourceAttributes) => Promise<boolean>;

export const apiReviewer: Reviewer = async (a) => {
  const resourceAttributes: Record<string, string> = { resource: a.resource, verb: a.verb };
  if (a.group) resourceAttributes.group = a.group;
  if (a.subresource) resourceAttributes.subresource = a.subresource;
  if (a.namespace) resourceAttributes.namespace = a.namespace;
  if (a.name) resourceAttributes.name = a.name;
  const review = await api.post<SelfSubjectAccessReview>(paths.ssar(), {
    apiVersion: 'authorization.k8s.io/v1',
    kind: 'SelfSubjectAccessReview',
    spec: { resourceAttributes },
  });
  return review?.status?.allowed === true;
};

/**
 * Answers per attribute set, asked once each. A failed review is not cached (and reads
 * as allowed: the server still refuses what it must, and a broken review endpoint
 * should not disable the whole console).
 */
export class AccessCache {
  private answers = new Map<string, boolean>();
  private inflight = new Map<string, Promise<boolean>>();

  constructor(private readonly review: Reviewer = apiReviewer) {}

  peek(a: ResourceAttributes): boolean | undefined {
    return this.answers.get(attrsKey(a));
  }

  check(a: ResourceAttributes): Promise<boolean> {
    const key = attrsKey(a);
    const known = this.answers.get(key);
    if (known !== undefined) return Promise.resolve(known);
    let p = this.inflight.get(key);
    if (!p) {
      p = this.review(a).then(
        (allowed) => {
          this.answers.set(key, allowed);
          this.inflight.delete(key);
          return allowed;
        },
        () => {
          this.inflight.delete(key);
          return true;
        },
      );
      this.inflight.set(key, p);
    }
    return p;
  }

  clear(): void {
    this.answers.clear();
    this.inflight.clear();
  }
}

export const accessCache = new AccessCache();

const RESOURCE_NOUNS: Record<string, string> = {
  virtualmachines: 'virtual machine',
  virtualmachineinstances: 'virtual machine',
  virtualmachineinstancemigrations: 'migration',
  nodes: 'node',
  datavolumes: 'DataVolume',
};

const SUBRESOURCE_PHRASES: Record<string, string> = {
  start: 'start',
  stop: 'stop',
  restart: 'restart',
  migrate: 'migrate',
  pause: 'pause',
  unpause: 'unpause',
  softreboot: 'soft reboot',
  console: 'open the serial console of',
  vnc: 'open the VNC screen of',
  proxy: 'read the metrics of',
};

/** "You are not allowed to start this virtual machine." and the like. */
export function deniedText(a: ResourceAttributes): string {
  const noun = RESOURCE_NOUNS[a.resource] ?? a.resource;
  const target = a.name ? `this ${noun}` : `${noun}s`;
  const where = !a.name && a.namespace ? ` in namespace ${a.namespace}` : '';
  let action: string;
  if (a.subresource && SUBRESOURCE_PHRASES[a.subresource]) action = `${SUBRESOURCE_PHRASES[a.subresource]} ${target}`;
  else if (a.verb === 'patch' && a.resource === 'nodes') action = `cordon or uncordon ${target}`;
  else action = `${a.verb} ${target}`;
  return `You are not allowed to ${action}${where}.`;
}

export interface GateState {
  disabled: boolean;
  /** Why it is disabled, for a tooltip; empty while the answer is pending. */
  reason: string;
}

/**
 * Whether an action button can be pressed: it needs permission (known, not pending)
 * and to make sense in the object's current state.
 */
export function gate(
  attrs: ResourceAttributes | null,
  allowed: boolean | undefined,
  applicable = true,
  notApplicableReason = '',
): GateState {
  if (attrs && allowed === false) return { disabled: true, reason: deniedText(attrs) };
  if (!applicable) return { disabled: true, reason: notApplicableReason };
  if (attrs && allowed === undefined) return { disabled: true, reason: '' };
  return { disabled: false, reason: '' };
}

/** Attribute builders for the actions the console gates. */
export const can = {
  vmAction: (ns: string, name: string, subresource: string): ResourceAttributes => ({
    group: 'subresources.kubevirt.io',
    resource: 'virtualmachines',
    subresource,
    verb: 'update',
    namespace: ns,
    name,
  }),
  vmiAction: (ns: string, name: string, subresource: string): ResourceAttributes => ({
    group: 'subresources.kubevirt.io',
    resource: 'virtualmachineinstances',
    subresource,
    verb: 'update',
    namespace: ns,
    name,
  }),
  vmiConsole: (ns: string, name: string, subresource: 'console' | 'vnc'): ResourceAttributes => ({
    group: 'subresources.kubevirt.io',
    resource: 'virtualmachineinstances',
    subresource,
    verb: 'get',
    namespace: ns,
    name,
  }),
  deleteVm: (ns: string, name: string): ResourceAttributes => ({
    group: 'kubevirt.io',
    resource: 'virtualmachines',
    verb: 'delete',
    namespace: ns,
    name,
  }),
  updateVm: (ns: string, name: string): ResourceAttributes => ({
    group: 'kubevirt.io',
    resource: 'virtualmachines',
    verb: 'update',
    namespace: ns,
    name,
  }),
  createVm: (ns: string): ResourceAttributes => ({
    group: 'kubevirt.io',
    resource: 'virtualmachines',
    verb: 'create',
    namespace: ns,
  }),
  deleteMigration: (ns: string, name?: string): ResourceAttributes => ({
    group: 'kubevirt.io',
    resource: 'virtualmachineinstancemigrations',
    verb: 'delete',
    namespace: ns,
    name,
  }),
  patchNode: (name: string): ResourceAttributes => ({ resource: 'nodes', verb: 'patch', name }),
  nodeProxy: (name: string): ResourceAttributes => ({ resource: 'nodes', subresource: 'proxy', verb: 'get', name }),
  createDv: (ns: string): ResourceAttributes => ({
    group: 'cdi.kubevirt.io',
    resource: 'datavolumes',
    verb: 'create',
    namespace: ns,
  }),
};
