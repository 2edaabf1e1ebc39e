#!/usr/bin/env bash
# Put a sandbox in a network namespace whose only way out is sandgate's proxy address.
#   sudo deploy/netns/sandbox-netns.sh up   NAME 10.200.7.1 10.200.7.2
#   sudo ip netns exec NAME env HTTPS_PROXY=... your-sandbox-command
#   sudo deploy/netns/sandbox-netns.sh down NAME
# sandgate listens on HOST_IP (proxy.listen = "HOST_IP:8080"); the namespace has no default route, so
# nothing but HOST_IP is reachable. Add the iptables rule below on the host so that, of HOST_IP, only the
# proxy port answers the namespace.
set -euo pipefail
cmd=${1:?up|down}; name=${2:?name}
case "$cmd" in
  up)
    host_ip=${3:?host ip}; ns_ip=${4:?namespace ip}; port=${PROXY_PORT:-8080}
    ip netns add "$name"
    ip link add "h-$name" type veth peer name "n-$name"
    ip link set "n-$name" netns "$name"
    ip addr add "$host_ip/30" dev "h-$name"; ip link set "h-$name" up
    ip netns exec "$name" ip addr add "$ns_ip/30" dev "n-$name"
    ip netns exec "$name" ip link set "n-$name" up
    ip netns exec "$name" ip link set lo up
    if command -v iptables >/dev/null; then
      iptables -A INPUT -i "h-$name" -p tcp --dport "$port" -j ACCEPT
      iptables -A INPUT -i "h-$name" -j DROP
    fi
    ;;
  down)
    ip netns del "$name" 2>/dev/null || true
    ip link del "h-$name" 2>/dev/null || true
    if command -v iptables >/dev/null; then
      iptables -D INPUT -i "h-$name" -j DROP 2>/dev/null || true
      iptables -D INPUT -i "h-$name" -p tcp --dport "${PROXY_PORT:-8080}" -j ACCEPT 2>/dev/null || true
    fi
    ;;
esac
