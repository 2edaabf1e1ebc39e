"""Secrets flowing to the network: the `sources` and `sinks` facts of a command. Pure helpers on words and text.

A **source** is sensitive data a command gets: a key or credential file it reads (`~/.ssh/*`, `~/.aws/*`,
`~/.config/gcloud`, `~/.netrc`, `~/.docker/config.json`, `.env*`, `/proc/*/environ`, ... as an operand, an
option's value, `@file`, `<file`, a redirect), the environment (`env`, `printenv`, `set`, `export -p`, a
`$VAR` whose name is a secret's: `*_TOKEN`, `*_KEY`, `*_SECRET`, `*_PASSWORD`, ... or a session secret's
name), a command substitution over any of these, or what an earlier command of its pipeline printed from them.
Each is `{"kind": "file"|"env"|"environment"|"archive", "name": str, "via": str}`.

A **sink** is where a command sends data off the machine: `{"kind", "host", "port"}` with kind `url`,
`header`, `cookie`, `user_agent`, `referrer`, `user`, `data`, `upload`, `dns`, `index_url`, `git_remote`,
`stdin` (a network program's input: nc, socat, openssl s_client, ssh, mail, sendmail, ...), `remote`, `cli`
(a cloud, cluster or forge CLI: `gh gist create`, `kubectl create secret --from-file`),
`dev_tcp` (a redirect to /dev/tcp or /dev/udp) or `code` (interpreter code that opens URLs or sockets);
`host` is "" when it is not known; `local: true` marks a loopback host (the data stays on this machine).

The policy asks (`toolcall.exfiltration`) when one command has both. Matching is by class (the shape of a
path, of a variable name, of a network argument), never by a list of known exfiltration commands.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import urlsplit

from gateway.toolcalls.urls import host_class

MAX_SCAN = 16_384           # characters of one word or code text scanned (longer: only the head)

# -- sensitive files -----------------------------------------------------------------------------------------
# A path is sensitive when one of its components sequences matches (anchored at a `/` or the start).
_SENSITIVE_PATH = re.compile(
    r"(?:^|/)(?:"
    r"\.ssh(?:/|$)|\.aws(?:/|$)|\.azure(?:/|$)|\.gnupg(?:/|$)|\.config/gcloud(?:/|$)|\.config/gh(?:/|$)|"
    r"\.kube/config$|\.kube(?:/|$)|\.docker/config\.json$|\.netrc$|_netrc$|\.git-credentials$|\.pypirc$|\.npmrc$|"
    r"\.vault-token$|\.pgpass$|\.my\.cnf$|\.env(?:\.[^/]*)?$|credentials(?:\.json)?$|"
    r"id_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?$|[^/]*\.pem$|[^/]*\.key$|"
    r"etc/shadow$|etc/gshadow$|proc/[^/]+/environ$|proc/[^/]+/task/[^/]+/environ$)")
_GLOB = re.compile(r"[*?\[]")
# What any sensitive path, variable or substitution needs somewhere in a word: a fast first test.
_MAYBE = re.compile(r"[$`*?\[]|[<>]\(|ssh|aws|azure|gnupg|gcloud|/gh|kube|docker|netrc|credentials|pypirc|npmrc|"
                    r"vault-token|pgpass|my\.cnf|\.env|id_|\.pem|\.key|shadow|environ")
# Where a glob over a sensitive place could land (`~/.s*/id_*`, `/proc/*/env*`).
_SAMPLES = ("~/.ssh/id_rsa", "~/.ssh/id_ed25519", "~/.ssh/config", "~/.aws/credentials", "~/.aws/config",
            "~/.config/gcloud/credentials.db", "~/.netrc", "~/.docker/config.json", "~/.git-credentials",
            "~/.kube/config", "~/.pypirc", "~/.npmrc", ".env", ".env.local", "/proc/self/environ", "/proc/1/environ",
            "~/.gnupg/private-keys-v1.d/k.key", "/etc/shadow")
# A sensitive path somewhere inside text (code, a command substitution): the same shapes, not anchored.
_SENSITIVE_TEXT = re.compile(
    r"\.ssh\b|\.aws\b|\.azure\b|\.gnupg\b|\.config/gcloud|\.config/gh\b|\.kube/config|\.docker/config\.json|"
    r"\.netrc\b|\.git-credentials|\.pypirc|\.npmrc|\.vault-token|\.pgpass|"
    r"(?<![\w.-])\.env(?:\.[\w-]+)?(?![\w/-])|/environ\b|\bid_(?:rsa|dsa|ecdsa|ed25519)\b|/etc/g?shadow\b")

# -- sensitive variables -------------------------------------------------------------------------------------
# Upper case, as environment variables are named (a lower-case `$key` is a script's own variable).
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:TOKEN|SECRET|SECRETS|PASSWORD|PASSWD|PASS|PASSPHRASE|CREDENTIALS?|APIKEY|KEY|KEY_ID|AUTH|COOKIE|"
    r"DSN|DATABASE_URL|CONNECTION_STRING)(?:_?[0-9]+)?$")
_VAR_REF = re.compile(r"\$(?:\{[!#]?([A-Za-z_][A-Za-z0-9_]*)[^}]*\}|([A-Za-z_][A-Za-z0-9_]*))")
_SUBST_START = re.compile(r"\$\(|`|[<>]\(")
# A command that prints the whole environment (at the start of a command inside text).
_ENV_DUMP = re.compile(r"(?:^|[;&|({`\n]\s*|\$\(\s*)(?:sudo\s+)?(?:printenv\b|env\s*(?:$|[|;)&>`]|-0\b|--null\b)|"
                       r"set\s*(?:$|[|;)&>`])|export\s+-p\b|declare\s+-[a-zA-Z]*[px]|typeset\s+-[a-zA-Z]*[px])")
_CODE_ENV_DUMP = re.compile(
    r"os\.environ(?!\s*(?:\[|\.get\b|\.setdefault\b|\.pop\b|\[))|os\.getenv\(\s*\)|environ\.(?:items|copy|keys|"
    r"values)|process\.env(?!\s*(?:\.|\[))|%ENV\b|\bENV\.(?:to_h|to_a|each|inspect|keys|map|select|sort)|"
    r"Deno\.env\.toObject|System\.getenv\(\s*\)|Sys\.getenv\(\s*\)|getenv\(\s*\)|/proc/self/environ")
_CODE_SECRET_VAR = re.compile(
    r"\b[A-Z][A-Z0-9_]*_(?:TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|SECRET_ACCESS_KEY|PRIVATE_KEY|KEY|"
    r"KEY_ID|CREDENTIALS|DATABASE_URL)\b")

# -- network -------------------------------------------------------------------------------------------------
_URL = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]{1,15})://[^\s'\"<>`]*")
_LOCAL_SCHEMES = frozenset({"file", "unix", "data", "about", "git+file", "jar", "mem"})
DNS_PROGRAMS = frozenset({"dig", "nslookup", "host", "ping", "ping6", "drill", "kdig", "delv", "traceroute",
                          "traceroute6", "tracepath", "mtr", "arping", "fping", "hping3", "whois", "nping",
                          "resolvectl", "systemd-resolve", "getent", "tcptraceroute", "dnsquery", "adig", "q",
                          "doggo", "dog"})
STREAM_PROGRAMS = frozenset({"nc", "ncat", "netcat", "nc.openbsd", "nc.traditional", "socat", "openssl", "telnet",
                             "ssh", "autossh", "mosh", "mail", "mailx", "sendmail", "msmtp", "mutt", "swaks",
                             "s-nail", "ftp", "lftp", "tftp", "sftp", "scp", "rsync", "rclone", "cryptcat",
                             "pwncat", "websocat", "wscat", "grpcurl", "mqtt", "mosquitto_pub", "redis-cli",
                             "smbclient", "ssmtp", "curl", "wget", "http", "https", "xh", "xhs", "nmap"})
_INDEX_OPTION = re.compile(r"^--?(?:extra-)?(?:index(?:-url)?|registry|source|repository(?:-url)?|repo-url|"
                           r"find-links|trusted-host|proxy|mirror)$", re.I)
_GIT_REMOTE_SUBS = frozenset({"push", "fetch", "pull", "clone", "ls-remote", "remote", "submodule", "config",
                              "archive", "request-pull", "send-pack", "fetch-pack"})
_SCP_LIKE = re.compile(r"^(?:[A-Za-z0-9._~-]+@)?([A-Za-z0-9.-]+\.[A-Za-z]{2,}|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+):(?!//)")
_CODE_NET = re.compile(
    r"urlopen|urllib|requests\.|httpx|aiohttp|http\.client|HTTPConnection|socket\b|create_connection|smtplib|"
    r"ftplib|gethostbyname|getaddrinfo|dns\.resolver|\bfetch\s*\(|XMLHttpRequest|axios|net\.connect|"
    r"net\.createConnection|https?\.(?:request|get)\b|dns\.(?:lookup|resolve)|Net::HTTP|TCPSocket|UDPSocket|"
    r"IO::Socket|LWP::|HTTP::Tiny|Net::DNS|Resolv\b|open-uri|URI\.open|curl_exec|file_get_contents\s*\(\s*['\"]https?|"
    r"fsockopen|WebSocket|Deno\.connect|Bun\.connect|sendmail|Invoke-WebRequest|Invoke-RestMethod|"
    r"java\.net|HttpClient|url\s*\(|download\.file|httr::|RCurl", re.I)

# Per program: options whose value a program uses locally (output files, keys it authenticates with, CA files):
# a sensitive path there is not data it sends.
_LOCAL_OPTIONS = {
    "curl": {"-o", "--output", "-D", "--dump-header", "-c", "--cookie-jar", "--trace", "--trace-ascii", "--libcurl",
             "--etag-save", "--stderr", "-E", "--cert", "--key", "--cacert", "--capath", "--crlfile",
             "--proxy-cacert", "--proxy-cert", "--proxy-key", "--netrc-file", "--pinnedpubkey", "--output-dir",
             "--ssl-sessions", "--hsts", "--alt-svc"},
    "wget": {"-O", "--output-document", "-o", "--output-file", "-a", "--append-output", "-P",
             "--directory-prefix", "--certificate", "--private-key", "--ca-certificate", "--ca-directory",
             "--save-cookies", "--crl-file"},
    "ssh": {"-i", "-F", "-E", "-S", "-o", "-I", "-J"},
    "scp": {"-i", "-F", "-S", "-o", "-J"},
    "sftp": {"-i", "-F", "-S", "-o", "-J", "-b"},
    "autossh": {"-i", "-F", "-o"},
    "openssl": {"-key", "-cert", "-CAfile", "-CApath", "-pass", "-out", "-keylogfile", "-sess_out", "-cert_chain"},
    "git": {"-c"},
    "http": {"--cert", "--cert-key", "--verify", "-o", "--output", "--session"},
    "https": {"--cert", "--cert-key", "--verify", "-o", "--output", "--session"},
    "xh": {"--cert", "--cert-key", "--verify", "-o", "--output", "--session"},
    "rsync": {"-e", "--rsh", "--password-file", "--log-file", "--exclude-from", "--include-from", "--files-from"},
    "ncat": {"--ssl-cert", "--ssl-key", "--ssl-trustfile", "-o", "--output"},
    "socat": set(),
}
_ALL_LOCAL = frozenset({"--cacert", "--ca-certificate", "--cert", "--key", "--ssl-key", "--ssl-cert",
                        "--kubeconfig", "--config", "--credentials-file", "--key-file", "--identity-file",
                        "--private-key", "--ssh-key", "-o", "--output", "--out", "--log-file"})
_NO_OPTIONS: frozenset[str] = frozenset()
_HTTP_NAMES = frozenset({"curl", "wget", "http", "https", "xh", "xhs"})
# Programs that read a directory operand whole (archivers, copiers): reading home or the root reads its keys.
_BULK_READERS = frozenset({"tar", "gtar", "bsdtar", "zip", "7z", "7za", "7zz", "rar", "cpio", "pax", "rsync", "scp",
                           "rclone", "cp", "grep", "rg", "ag", "find", "du", "base64", "gzip", "xz", "zstd",
                           "restic", "borg", "duplicity", "aws", "gsutil", "az", "gcloud", "sftp"})


@dataclass(frozen=True)
class Site:
    """What a site adds in the policy's data (tables.py): sensitive file globs, secret variable name globs."""
    files: tuple[str, ...] = ()
    variables: tuple[str, ...] = ()


NO_SITE = Site()


# -- sources -------------------------------------------------------------------------------------------------
def sensitive_path(word: str, extra: tuple[str, ...] = ()) -> bool:
    """Whether a path word names a key or credential file (or a glob that could); `extra`: a site's globs."""
    path = word.strip()
    if not path or len(path) > 4096 or (not extra and not _MAYBE.search(path)):
        return False
    path = re.sub(r"^(?:\$\{?HOME\}?|~[A-Za-z0-9_-]*)(?=/|$)", "~", path)
    if extra and any(fnmatch.fnmatchcase(path, g) or fnmatch.fnmatchcase(path, "*/" + g.lstrip("~/"))
                     for g in extra):
        return True
    if not _MAYBE.search(path):
        return False
    if _SENSITIVE_PATH.search(path.rstrip("/")):
        return True
    if _GLOB.search(path):
        pattern = path if path.startswith(("/", "~")) else "*/" + path
        return any(fnmatch.fnmatchcase(sample, pattern) or fnmatch.fnmatchcase("/workspace/" + sample, pattern)
                   for sample in _SAMPLES)
    return False


def secret_variable(name: str, secret_names: Iterable[str] = (), extra: tuple[str, ...] = ()) -> bool:
    """Whether an environment variable name is a secret's: `*_TOKEN`, `*_KEY`, `*_SECRET`, `*_PASSWORD`, ...,
    named after one of the session's secrets (`github` -> `GITHUB`, `GITHUB_*`), or matching a site's glob."""
    if _SECRET_NAME.search(name) or (extra and any(fnmatch.fnmatchcase(name, g) for g in extra)):
        return True
    upper = name.upper()
    for secret in secret_names:
        stem = re.sub(r"[^A-Za-z0-9]+", "_", secret).upper().strip("_")
        if stem and (upper == stem or upper.startswith(stem + "_")):
            return True
    return False


def payload(word: str) -> str:
    """The file a data word reads: `@f`, `<f`, `name=@f`, `name@f` (httpie), `name=<f`, `--opt=f`."""
    match = re.match(r"^(?:[\w.\-\[\]]*(?:=@|=<|@|<|:=@)|--?[\w-]+=)(.+)$", word)
    return match.group(1) if match else word


def substitutions(word: str) -> list[str]:
    """The texts of the command substitutions (`$(...)`, backticks, `<(...)`) inside a word, outermost first."""
    out: list[str] = []
    text = word[:MAX_SCAN]
    for match in _SUBST_START.finditer(text):
        start = match.end()
        if match.group() == "`":
            end = text.find("`", start)
            if end > start:
                out.append(text[start:end])
            continue
        depth, i = 1, start
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        out.append(text[start:i - 1] if depth == 0 else text[start:])
    return out


def text_sources(text: str, secret_names: Iterable[str] = (), tainted: Iterable[str] = (),
                 site: Site = NO_SITE) -> list[dict]:
    """Sources inside shell text run to produce a value (a command substitution's body)."""
    text = text[:MAX_SCAN]
    out = []
    match = _SENSITIVE_TEXT.search(text)
    if match:
        out.append({"kind": "file", "name": match.group(), "via": "substitution"})
    elif site.files:
        hit = next((t for t in text.split()[:64] if sensitive_path(payload(t), site.files)), None)
        if hit:
            out.append({"kind": "file", "name": hit, "via": "substitution"})
    if _ENV_DUMP.search(text):
        out.append({"kind": "environment", "name": "env", "via": "substitution"})
    out += var_sources(text, secret_names, tainted, "substitution", site)
    return out


def var_sources(text: str, secret_names: Iterable[str], tainted: Iterable[str], via: str,
                site: Site = NO_SITE) -> list[dict]:
    tainted = set(tainted)
    out = []
    for match in _VAR_REF.finditer(text[:MAX_SCAN]):
        name = match.group(1) or match.group(2)
        if name in tainted:
            out.append({"kind": "env", "name": name, "via": via})
        elif secret_variable(name, secret_names, site.variables):
            out.append({"kind": "env", "name": name, "via": via})
    return out


def word_sources(word: str, secret_names: Iterable[str] = (), tainted: Iterable[str] = (),
                 site: Site = NO_SITE) -> list[dict]:
    """Sources carried by one argument word: a sensitive file it names (as itself, `@file`, `<file`,
    `--opt=file`), a secret variable it expands, a command substitution over any of these."""
    if not _MAYBE.search(word) and not site.files:
        return []
    out: list[dict] = []
    if sensitive_path(payload(word), site.files) or sensitive_path(word, site.files):
        out.append({"kind": "file", "name": payload(word), "via": "argument"})
    for inner in substitutions(word):
        out += text_sources(inner, secret_names, tainted, site)
    out += var_sources(word, secret_names, tainted, "argument", site)
    return out


def code_sources(text: str, secret_names: Iterable[str] = ()) -> list[dict]:
    """Sources in interpreter code: sensitive paths, the whole environment, secret-shaped variable names."""
    text = text[:MAX_SCAN * 4]
    out = []
    match = _SENSITIVE_TEXT.search(text)
    if match:
        out.append({"kind": "file", "name": match.group(), "via": "code"})
    if _CODE_ENV_DUMP.search(text):
        out.append({"kind": "environment", "name": "environ", "via": "code"})
    match = _CODE_SECRET_VAR.search(text)
    if match:
        out.append({"kind": "env", "name": match.group(), "via": "code"})
    for secret in secret_names:
        stem = re.sub(r"[^A-Za-z0-9]+", "_", secret).upper().strip("_")
        if stem and re.search(r"\b" + re.escape(stem) + r"(?:_[A-Z0-9_]+)?\b", text):
            out.append({"kind": "env", "name": stem, "via": "code"})
            break
    return out


def code_sinks(text: str) -> list[dict]:
    """Sinks in interpreter code: the hosts of URL literals it holds when it opens connections; an unknown host
    when it opens sockets or resolves names, or builds its URLs."""
    text = text[:MAX_SCAN * 4]
    if not _CODE_NET.search(text):
        return []
    out = [url_sink("code", m.group()) for m in _URL.finditer(text) if m.group(1).lower() not in _LOCAL_SCHEMES]
    if not out or re.search(r"socket|gethostbyname|getaddrinfo|dns\.|Resolv|Net::DNS|connect\s*\(", text, re.I):
        out.append({"kind": "code", "host": "", "port": 0})
    return out[:16]


# -- sinks ---------------------------------------------------------------------------------------------------
def url_sink(kind: str, url: str) -> dict:
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".").lower()
        port = parts.port or {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}.get(parts.scheme.lower(), 0)
    except ValueError:
        host, port = "", 0
    if re.search(r"[$`(){}\s]", host):       # a computed host (`$(...).evil.com`): not known
        host = ""
    return {"kind": kind, "host": host, "port": port}


_CURL_KINDS = {"-H": "header", "--header": "header", "--proxy-header": "header", "-b": "cookie", "--cookie": "cookie",
               "-A": "user_agent", "--user-agent": "user_agent", "-e": "referrer", "--referer": "referrer",
               "-u": "user", "--user": "user", "--proxy-user": "user", "--oauth2-bearer": "header",
               "-d": "data", "--data": "data", "--data-raw": "data", "--data-binary": "data",
               "--data-urlencode": "data", "--data-ascii": "data", "--json": "data", "-F": "data", "--form": "data",
               "--form-string": "data", "-T": "upload", "--upload-file": "upload", "-K": "data", "--config": "data",
               "--url-query": "data", "--header-file": "header", "--post-data": "data", "--post-file": "data",
               "--body-data": "data", "--body-file": "data", "--user-agent=": "user_agent",
               "-U": "user_agent", "--http-user": "user", "--http-password": "user", "--password": "user",
               "--mail-from": "data", "--mail-rcpt": "data"}


def command_sinks(name: str, words: list[str], operands: list[str], values: dict[str, list[str]],
                  redirects: list[dict], http_urls: list[dict], remote: str | None,
                  code_text: str | None = None, stream: frozenset[str] | None = None,
                  dns: frozenset[str] | None = None, cli: frozenset[str] = frozenset()) -> list[dict]:
    """Where one command sends data: URLs in any of its words, its HTTP options, DNS names, package indexes,
    git remotes, a network program's input, /dev/tcp redirects, interpreter code that opens connections."""
    sinks: list[dict] = []
    for url in http_urls:
        if url.get("parsed"):
            sinks.append({"kind": "url", "host": url.get("host", ""), "port": url.get("port", 0)})
        else:
            sinks.append({"kind": "url", "host": "", "port": 0})
    git_remote = name == "git" and bool(operands) and operands[0] in _GIT_REMOTE_SUBS
    linked = [w for w in words[:256] if "://" in w]
    index_values = {v for key, vals in values.items() if _INDEX_OPTION.match(key) for v in vals} if linked else set()
    for word in linked:
        for match in _URL.finditer(word[:MAX_SCAN]):
            if match.group(1).lower() in _LOCAL_SCHEMES:
                continue
            kind = "index_url" if word in index_values else "git_remote" if git_remote else "url"
            sinks.append(url_sink(kind, match.group()))
    if git_remote:
        for word in operands[1:]:
            match = _SCP_LIKE.match(word)
            if match:
                sinks.append({"kind": "git_remote", "host": match.group(1).split("@")[-1].lower(), "port": 22})
    if name in ("curl", "wget", "http", "https", "xh", "xhs"):
        for key in values:
            kind = _CURL_KINDS.get(key)
            if kind:
                sinks.append({"kind": kind, "host": _first_host(sinks), "port": _first_port(sinks)})
    stream = STREAM_PROGRAMS if stream is None else stream | _HTTP_NAMES
    if name in (DNS_PROGRAMS if dns is None else dns) and operands:
        names = [o for o in operands if o not in ("hosts", "ahosts", "ahostsv4", "ahostsv6", "query")
                 and not o.startswith("@") and not o.startswith("+")]
        sinks += [{"kind": "dns", "host": "", "port": 53} for _ in names[:4]]
    if name in cli:                             # a cloud, cluster or forge CLI sends what it is given to an API
        sinks.append({"kind": "cli", "host": "", "port": 0})
    if name in stream and name not in _HTTP_NAMES:
        sinks.append({"kind": "stdin", "host": remote or "", "port": 0})
    elif remote:
        sinks.append({"kind": "remote", "host": "" if "/" in remote else remote, "port": 0})
    for redirect in redirects:
        target = redirect.get("target") or ""
        if re.match(r"^/dev/(?:tcp|udp)/", target):
            sinks.append({"kind": "dev_tcp", "host": target.split("/")[3] if target.count("/") >= 3 else "",
                          "port": 0})
    if code_text:
        sinks += code_sinks(code_text)
    return dedupe(_local(sinks))


def _first_host(sinks: list[dict]) -> str:
    return next((s["host"] for s in sinks if s["kind"] == "url"), "")


def _first_port(sinks: list[dict]) -> int:
    return next((s["port"] for s in sinks if s["kind"] == "url"), 0)


def _local(sinks: list[dict]) -> list[dict]:
    """Mark sinks on this machine (`localhost`, 127.0.0.0/8, ::1 in any spelling): data sent there stays."""
    for sink in sinks:
        if sink.get("host") and host_class(sink["host"]) == "loopback":
            sink["local"] = True
    return sinks


def dedupe(items: list[dict]) -> list[dict]:
    """`items` without repeats (dicts equal item by item), in their first order."""
    seen: set = set()
    out = []
    for item in items:
        key = tuple(sorted(item.items()))
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out[:32]


def command_sources(name: str, words: list[str], values: dict[str, list[str]], paths: list[dict],
                    secret_names: Iterable[str] = (), tainted_vars: Iterable[str] = (),
                    tainted_files: Iterable[str] = (), site: Site = NO_SITE) -> list[dict]:
    """The sensitive data one command reads from its own words (files, variables, substitutions), the whole
    environment it prints (env, printenv, set), and home or the root read whole by an archiver or copier."""
    out: list[dict] = []
    hits = [w for w in words[:256] if site.files or _MAYBE.search(w)]
    marked = [f for f in paths if site.files or (tainted_files and f.get("normalized") in tainted_files) or
              (name in _BULK_READERS and (f.get("is_home") or f.get("is_root"))) or
              _MAYBE.search(f.get("normalized") or "")]
    skip: set[str] = set()
    if hits or marked:
        local = _LOCAL_OPTIONS.get(name, _NO_OPTIONS)
        skip = {v for key, vals in values.items() if key in local or key in _ALL_LOCAL for v in vals}
        for i, word in enumerate(words[:256]):   # an option sandgate's option table does not know takes a value
            key = word.split("=", 1)[0]
            if key in local or key in _ALL_LOCAL:
                skip.add(word if "=" in word else words[i + 1] if i + 1 < len(words) else word)
        if name == "git":
            skip |= {w for w in hits if w.lower().startswith(("core.sshcommand=", "credential."))}
    for word in hits:
        if word not in skip:
            out += word_sources(word, secret_names, tainted_vars, site)
    if name == "printenv":
        out += [{"kind": "env", "name": w, "via": "argument"} for w in words
                if not w.startswith("-") and secret_variable(w, secret_names, site.variables)]
    for fact in marked:
        norm = fact.get("normalized") or ""
        if tainted_files and norm in tainted_files:
            out.append({"kind": "file", "name": norm, "via": "written from a secret"})
        elif name in _BULK_READERS and (fact.get("is_home") or fact.get("is_root")) and fact.get("raw") not in skip:
            out.append({"kind": "archive", "name": fact.get("raw", ""), "via": "argument"})
        elif fact.get("raw") not in skip and sensitive_path(norm, site.files):
            out.append({"kind": "file", "name": norm, "via": "argument"})
    return dedupe(out)


def environment_dump(name: str, operands: list[str], flags: list[str], wrappers: list[str], eff: list[str]) -> bool:
    """Whether the command prints the environment: env/printenv alone, set/export -p/declare -p."""
    if not eff and wrappers and wrappers[-1].split()[0] == "env":
        return True
    if name == "printenv":
        return not operands
    if name == "set" and not operands and not flags:
        return True
    if name in ("export", "declare", "typeset") and not operands and set(flags) <= {"-p", "-x"}:
        return True
    return name == "env" and not operands
