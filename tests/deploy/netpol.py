"""A small evaluator of Kubernetes NetworkPolicy semantics, to ask the manifests "may A reach B on port P?".

It follows the networking.k8s.io/v1 rules: a pod is isolated for a direction when some policy in its namespace
selects it and lists that direction in policyTypes; an isolated pod allows a connection when any rule of any
such policy matches it; a connection needs the source's egress and the destination's ingress to allow it.
Peers: podSelector alone means the policy's own namespace, namespaceSelector alone every pod of the matching
namespaces, both together the matching pods of the matching namespaces, ipBlock an address outside the
cluster. A rule without `to`/`from` matches every peer, without `ports` every port.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict = field(default_factory=dict)

    @property
    def ns_labels(self) -> dict:
        return {"kubernetes.io/metadata.name": self.namespace}


@dataclass(frozen=True)
class External:
    ip: str


def matches(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector; {} matches everything. Only the operators the manifests may use are understood."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {"In": lambda: labels.get(key) in values, "NotIn": lambda: labels.get(key) not in values,
              "Exists": lambda: key in labels, "DoesNotExist": lambda: key not in labels}[op]()
        if not ok:
            return False
    return True


def peer_matches(peer: dict, policy_ns: str, other: Pod | External) -> bool:
    if "ipBlock" in peer:
        if not isinstance(other, External):
            return False
        addr = ipaddress.ip_address(other.ip)
        block = peer["ipBlock"]
        cidr = ipaddress.ip_network(block["cidr"])
        if addr.version != cidr.version or addr not in cidr:
            return False
        return not any(addr in ipaddress.ip_network(e) for e in block.get("except", [])
                       if ipaddress.ip_network(e).version == addr.version)
    if isinstance(other, External):
        return False
    if "namespaceSelector" in peer:
        if not matches(peer["namespaceSelector"], other.ns_labels):
            return False
    elif other.namespace != policy_ns:
        return False
    return matches(peer.get("podSelector", {}), other.labels)


def port_matches(ports: list | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        lo = p.get("port")
        hi = p.get("endPort", lo)
        if lo is None or (isinstance(lo, int) and lo <= port <= hi):
            return True
    return False


def direction_allows(policies: list[dict], pod: Pod, other: Pod | External, port: int, protocol: str,
                     direction: str) -> bool:
    """Egress of `pod` towards `other`, or ingress of `pod` from `other` (direction "Egress"/"Ingress")."""
    selecting = [p for p in policies if p["metadata"]["namespace"] == pod.namespace
                 and matches(p["spec"]["podSelector"], pod.labels)
                 and direction in p["spec"].get("policyTypes", ["Ingress"])]
    if not selecting:
        return True                                     # not isolated in this direction
    key, peers_key = ("egress", "to") if direction == "Egress" else ("ingress", "from")
    for policy in selecting:
        ns = policy["metadata"]["namespace"]
        for rule in policy["spec"].get(key) or []:
            peers = rule.get(peers_key)
            if (not peers or any(peer_matches(peer, ns, other) for peer in peers)) and \
                    port_matches(rule.get("ports"), port, protocol):
                return True
    return False


def allowed(policies: list[dict], src: Pod, dst: Pod | External, port: int, protocol: str = "TCP") -> bool:
    if not direction_allows(policies, src, dst, port, protocol, "Egress"):
        return False
    if isinstance(dst, Pod):
        return direction_allows(policies, dst, src, port, protocol, "Ingress")
    return True
