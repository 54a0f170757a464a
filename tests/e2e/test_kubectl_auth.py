"""Who may do what, with kubectl as users use it: users from `virtplane user add`
(client certificates) and from `--token-auth-file` (bearer tokens); `kubectl auth can-i`
(with `--list`, `--as`, `--as-group`), `kubectl auth whoami`, the Forbidden texts kubectl
prints, `kubectl create role/rolebinding` with the escalation check, and the built-in
roles as `kubectl get` shows them."""

import json
import subprocess

import pytest
import yaml

from conftest import Server, kubectl_bin, virtplane_bin, vm_manifest

TOKENS = 'bob-token,bob,uid-bob,"viewers"\ndave-token,dave,uid-dave\n'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("virtplane-auth")
    token_file = work / "tokens.csv"
    token_file.write_text(TOKENS)
    srv = Server(work, extra_args=("--token-auth-file", str(token_file)))
    srv.start()
    for ns in ("team-a", "team-b"):
        srv.create_namespace(ns)
        srv.create_vm("vm1", namespace=ns)
    yield srv
    srv.stop()


def user_add(server, *args):
    proc = subprocess.run([virtplane_bin(), "user", "add", *args, "--data-dir", str(server.data)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def users(server):
    """alice: kubevirt.io:edit in team-a (certificate, group devs); carol: admin in
    team-a (certificate); bob: view in team-a through group viewers (token); dave:
    nothing (token)."""
    kubectl_bin()
    alice = user_add(server, "alice", "--group", "devs", "--namespace", "team-a", "--role", "kubevirt.io:edit")
    carol = user_add(server, "carol", "--namespace", "team-a", "--role", "admin")
    paths = {"alice": alice.stdout.strip(), "carol": carol.stdout.strip()}
    assert paths["alice"] == str(server.data / "users" / "alice.kubeconfig")
    assert "rolebinding alice-kubevirt.io:edit binds ClusterRole kubevirt.io:edit to user alice in namespace team-a" in alice.stderr
    config = yaml.safe_load(server.kubeconfig.read_text())
    for name in ("bob", "dave"):
        config["users"][0]["user"] = {"token": f"{name}-token"}
        path = server.dir / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        paths[name] = str(path)
    server.kubectl("create", "rolebinding", "viewers-view", "--clusterrole=view", "--group=viewers",
                   "-n", "team-a").ok()
    return paths


def as_user(server, users, name, *args):
    return server.kubectl(*args, kubeconfig=users[name],
                          env={"KUBECACHEDIR": str(server.dir / f"cache-{name}")})


def test_whoami_for_certificate_and_token_users(server, users):
    r = as_user(server, users, "alice", "auth", "whoami").ok()
    assert r.out.split("\n")[:3] == ["ATTRIBUTE   VALUE", "Username    alice",
                                     "Groups      [devs system:authenticated]"], r.out
    r = as_user(server, users, "bob", "auth", "whoami", "-o", "json").ok()
    info = json.loads(r.out)["status"]["userInfo"]
    assert info == {"username": "bob", "uid": "uid-bob", "groups": ["viewers", "system:authenticated"]}
    r = server.kubectl("auth", "whoami").ok()
    assert "Groups      [system:masters system:authenticated]" in r.out


@pytest.mark.parametrize("user,args,answer", [
    ("alice", ("create", "virtualmachines", "-n", "team-a"), "yes"),
    ("alice", ("delete", "vm/vm1", "-n", "team-a"), "yes"),
    ("alice", ("deletecollection", "vms", "-n", "team-a"), "no"),
    ("alice", ("get", "vms", "-n", "team-b"), "no"),
    ("alice", ("list", "vms", "--all-namespaces"), "no"),
    ("alice", ("get", "secrets", "-n", "team-a"), "no"),
    ("carol", ("get", "secrets", "-n", "team-a"), "yes"),
    ("carol", ("create", "rolebindings", "-n", "team-a"), "yes"),
    ("bob", ("watch", "vmis", "-n", "team-a"), "yes"),
    ("bob", ("patch", "vm", "-n", "team-a"), "no"),
    ("bob", ("list", "datavolumes", "-n", "team-a"), "yes"),
    ("dave", ("get", "vms", "-n", "team-a"), "no"),
    ("dave", ("create", "selfsubjectaccessreviews.authorization.k8s.io"), "yes"),
])
def test_can_i(server, users, user, args, answer):
    r = as_user(server, users, user, "auth", "can-i", *args)
    assert (r.rc, r.out.strip()) == ((0, "yes") if answer == "yes" else (1, "no")), repr(r)


def ssar(server, users, user, verb, group, resource, subresource, namespace):
    """A SelfSubjectAccessReview sent with `kubectl create`: kubectl's RESTMapper knows
    no `virtualmachines` in subresources.kubevirt.io (virt-api lists only its
    subresources), so `kubectl auth can-i` cannot name them, as against KubeVirt."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                              "subresource": subresource, "namespace": namespace}}}
    path = server.write(f"ssar-{user}-{resource}-{subresource}.yaml", review)
    r = as_user(server, users, user, "create", "--validate=false", "-f", str(path), "-o", "json").ok()
    return json.loads(r.out)["status"]["allowed"]


def test_can_i_subresources(server, users):
    """virtctl's subresources (console, vnc, start, migrate) and the status subresource:
    edit has console, vnc and start; migrate needs kubevirt.io:migrate in current
    KubeVirt; view has none of them; status is the controllers'."""
    sub = "subresources.kubevirt.io"
    for user, resource, subresource, allowed in (
        ("alice", "virtualmachineinstances", "console", True),
        ("alice", "virtualmachineinstances", "vnc", True),
        ("alice", "virtualmachines", "start", True),
        ("alice", "virtualmachines", "migrate", False),
        ("bob", "virtualmachineinstances", "console", False),
        ("carol", "virtualmachines", "migrate", False),
    ):
        verb = "get" if resource == "virtualmachineinstances" else "update"
        assert ssar(server, users, user, verb, sub, resource, subresource, "team-a") is allowed, \
            (user, resource, subresource)
    r = as_user(server, users, "alice", "auth", "can-i", "patch", "virtualmachines", "--subresource=status",
                "-n", "team-a")
    assert (r.rc, r.out.strip()) == (1, "no"), repr(r)
    r = server.kubectl("auth", "can-i", "patch", "virtualmachines", "--subresource=status", "-n", "team-a")
    assert (r.rc, r.out.strip()) == (0, "yes"), repr(r)
    r = as_user(server, users, "alice", "auth", "can-i", "--list", "-n", "team-a").ok()
    rows = [l.split() for l in r.out.splitlines()]
    assert ["virtualmachineinstances.subresources.kubevirt.io/console", "[]", "[]", "[get]"] in rows, r.out


def test_can_i_list(server, users):
    r = as_user(server, users, "alice", "auth", "can-i", "--list", "-n", "team-a").ok()
    lines = r.out.splitlines()
    assert lines[0].split() == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"], r.out
    rows = {l.split()[0]: l for l in lines[1:] if l.strip() and not l.startswith(" ")}
    assert rows["virtualmachines.kubevirt.io"].endswith("[get delete create update patch list watch]"), r.out
    assert "virtualmachineinstancemigrations.kubevirt.io" in rows
    assert "selfsubjectaccessreviews.authorization.k8s.io" in rows
    assert any("[/apis/*]" in l for l in lines), r.out
    # In team-b alice holds only what every authenticated user holds.
    r = as_user(server, users, "alice", "auth", "can-i", "--list", "-n", "team-b").ok()
    assert "virtualmachines.kubevirt.io " not in r.out, r.out


def test_can_i_as_another_user(server, users):
    r = server.kubectl("auth", "can-i", "delete", "vm/vm1", "-n", "team-a", "--as", "alice")
    assert (r.rc, r.out.strip()) == (0, "yes"), repr(r)
    r = server.kubectl("auth", "can-i", "delete", "vm/vm1", "-n", "team-b", "--as", "alice")
    assert (r.rc, r.out.strip()) == (1, "no"), repr(r)
    # bob's groups are his token's, not the impersonated user's: --as-group gives them.
    r = server.kubectl("auth", "can-i", "get", "vm", "-n", "team-a", "--as", "bob")
    assert r.out.strip() == "no", repr(r)
    r = server.kubectl("auth", "can-i", "get", "vm", "-n", "team-a", "--as", "bob", "--as-group", "viewers")
    assert r.out.strip() == "yes", repr(r)
    r = server.kubectl("auth", "can-i", "--list", "-n", "team-a", "--as", "alice").ok()
    assert "virtualmachines.kubevirt.io" in r.out
    # alice may not impersonate.
    r = as_user(server, users, "alice", "auth", "can-i", "get", "vm", "-n", "team-a", "--as", "bob").failed()
    assert ('users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" '
            'at the cluster scope') in r.err, repr(r)


def test_kubectl_prints_kube_forbidden_texts(server, users):
    r = as_user(server, users, "alice", "get", "vms", "-n", "team-b").failed()
    assert r.err.strip().splitlines()[-1] == (
        'Error from server (Forbidden): virtualmachines.kubevirt.io is forbidden: User "alice" cannot list '
        'resource "virtualmachines" in API group "kubevirt.io" in the namespace "team-b"'), r.err
    r = as_user(server, users, "bob", "delete", "vm", "vm1", "-n", "team-a").failed()
    assert r.err.strip().splitlines()[-1] == (
        'Error from server (Forbidden): virtualmachines.kubevirt.io "vm1" is forbidden: User "bob" cannot '
        'delete resource "virtualmachines" in API group "kubevirt.io" in the namespace "team-a"'), r.err
    r = as_user(server, users, "dave", "get", "nodes").failed()
    assert r.err.strip().splitlines()[-1] == (
        'Error from server (Forbidden): nodes is forbidden: User "dave" cannot list resource "nodes" in API '
        'group "" at the cluster scope'), r.err
    # What one may, works: alice creates and reads VMs in team-a.
    manifest = server.write("alice-vm.yaml", vm_manifest("alice-vm", namespace="team-a"))
    as_user(server, users, "alice", "apply", "-f", str(manifest)).ok()
    r = as_user(server, users, "alice", "get", "vm", "alice-vm", "-n", "team-a", "-o", "name").ok()
    assert r.out == "virtualmachine.kubevirt.io/alice-vm\n"


def test_create_role_and_rolebinding_with_the_escalation_check(server, users):
    # carol (admin in team-a) binds what she holds...
    as_user(server, users, "carol", "create", "role", "vm-reader", "--verb=get,list",
            "--resource=virtualmachines.kubevirt.io", "-n", "team-a").ok()
    as_user(server, users, "carol", "create", "rolebinding", "dave-reader", "--role=vm-reader",
            "--user=dave", "-n", "team-a").ok()
    r = as_user(server, users, "dave", "auth", "can-i", "list", "vms", "-n", "team-a")
    assert r.out.strip() == "yes", repr(r)
    # ... and not what she does not.
    r = as_user(server, users, "carol", "create", "rolebinding", "carol-root", "--clusterrole=cluster-admin",
                "--user=carol", "-n", "team-a").failed()
    assert r.err.strip() == (
        'error: failed to create rolebinding: rolebindings.rbac.authorization.k8s.io "carol-root" is forbidden: '
        'user "carol" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n'
        '{NonResourceURLs:["*"], Verbs:["*"]}'), r.err
    r = as_user(server, users, "carol", "create", "role", "node-reader", "--verb=get", "--resource=nodes",
                "-n", "team-a").failed()
    assert ('roles.rbac.authorization.k8s.io "node-reader" is forbidden: user "carol" '
            '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
            '{APIGroups:[""], Resources:["nodes"], Verbs:["get"]}') in r.err, r.err
    # alice may not touch RBAC at all.
    r = as_user(server, users, "alice", "create", "rolebinding", "x", "--clusterrole=view", "--user=alice",
                "-n", "team-a").failed()
    assert ('rolebindings.rbac.authorization.k8s.io is forbidden: User "alice" cannot create resource '
            '"rolebindings" in API group "rbac.authorization.k8s.io" in the namespace "team-a"') in r.err, r.err


def test_builtin_roles_as_kubectl_shows_them(server, users):
    r = server.kubectl("get", "clusterroles", "-o", "name").ok()
    names = set(r.out.split())
    for role in ("cluster-admin", "admin", "edit", "view", "system:discovery", "system:basic-user",
                 "system:public-info-viewer", "kubevirt.io:admin", "kubevirt.io:edit", "kubevirt.io:view",
                 "kubevirt.io:migrate", "cdi.kubevirt.io:edit"):
        assert f"clusterrole.rbac.authorization.k8s.io/{role}" in names, r.out
    # edit aggregates kubevirt.io:edit and cdi.kubevirt.io:edit, as KubeVirt ships them.
    edit = json.loads(server.kubectl("get", "clusterrole", "edit", "-o", "json").ok().out)
    assert edit["aggregationRule"] == {"clusterRoleSelectors": [
        {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}}]}
    groups = {g for rule in edit["rules"] for g in rule.get("apiGroups", [])}
    assert {"kubevirt.io", "subresources.kubevirt.io", "cdi.kubevirt.io", ""} <= groups
    r = server.kubectl("get", "rolebindings", "-n", "team-a", "-o", "wide").ok()
    header = r.out.splitlines()[0].split()
    assert header == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"], r.out
    row = next(l.split() for l in r.out.splitlines() if l.startswith("viewers-view"))
    assert row[1] == "ClusterRole/view" and row[3] == "viewers", r.out
    r = server.kubectl("get", "clusterrolebinding", "system:public-info-viewer", "-o", "wide").ok()
    assert "system:authenticated, system:unauthenticated" in r.out
    r = server.kubectl("api-resources", "--api-group=rbac.authorization.k8s.io", "-o", "name").ok()
    assert r.out.split() == ["clusterrolebindings.rbac.authorization.k8s.io",
                             "clusterroles.rbac.authorization.k8s.io",
                             "rolebindings.rbac.authorization.k8s.io",
                             "roles.rbac.authorization.k8s.io"], r.out
