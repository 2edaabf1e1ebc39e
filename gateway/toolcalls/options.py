"""Command arguments -> flags, operands and option values (`parse_options`), getopt style.

Pure. A per-command table names the options that take a separate argument, so option values are not
mistaken for operands (`git -C dir status`, `curl -o out URL`).
"""
from __future__ import annotations

# command -> options that take a separate argument (for telling operands from option values)
_ARG_OPTIONS: dict[str, frozenset[str]] = {name: frozenset(text.split()) for name, text in {
    "git": "-C -c --git-dir --work-tree --namespace --exec-path -o --push-option --repo --receive-pack --exec "
           "-m -F --message --file -b -B --branch --author --date --reference --depth",
    "kubectl": "-n --namespace --context --cluster --kubeconfig -s --server --user --token -f --filename "
               "-l --selector -o --output -c --container --field-selector --type -p --patch --replicas",
    "helm": "-n --namespace --kube-context --kubeconfig -f --values --set --set-string --set-file --version "
            "--repo -o --output --timeout",
    "docker": "-H --host --context --config -f --file -t --tag -e --env -v --volume -p --publish -w --workdir "
              "--name --network -u --user --entrypoint --platform -l --label",
    "curl": "-X --request -d --data --data-raw --data-binary --data-urlencode --data-ascii --json -F --form "
            "--form-string -H --header -o --output -u --user -A --user-agent -e --referer -b --cookie -c "
            "--cookie-jar -T --upload-file -x --proxy -U --proxy-user -m --max-time --connect-timeout -w "
            "--write-out -K --config -E --cert --key --cacert --capath -r --range -C --continue-at --resolve "
            "--connect-to --retry --retry-delay --retry-max-time -y -Y --limit-rate --interface --url -z "
            "--time-cond --max-filesize -P --ftp-port --oauth2-bearer --proto --proto-redir -Q --quote "
            "--unix-socket --dns-servers --local-port -t --telnet-option --variable --output-dir",
    "wget": "-O -o -a -P -U -e -t -T -i -B --output-document --output-file --post-data --post-file --method "
            "--body-data --body-file --header --user-agent --directory-prefix --tries --timeout --user "
            "--password --input-file",
    "psql": "-c --command -d --dbname -h --host -p --port -U --username -f --file -v --set --variable -o "
            "--output -L --log-file -P --pset -F -R",
    "mysql": "-e --execute -u --user -h --host -P --port -D --database -S --socket --default-character-set",
    "truncate": "-s --size -r --reference",
    "shred": "-n --iterations -s --size --random-source",
    "gcloud": "--project --region --zone --account --configuration --format --filter --flags-file",
    "aws": "--region --profile --output --endpoint-url --query --cli-input-json",
    "sed": "-e -f --expression --file -l --line-length",
    "cp": "-t --target-directory -S --suffix",
    "mv": "-t --target-directory -S --suffix",
    "tee": "",
}.items()}
_ARG_OPTIONS["mariadb"] = _ARG_OPTIONS["mysql"]
_ARG_OPTIONS["podman"] = _ARG_OPTIONS["docker"]


def parse_options(name: str, words: list[str]) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(flags, operands, option values) of a command's arguments, getopt style, per-command option table."""
    takes = _ARG_OPTIONS.get(name, frozenset())
    flags: list[str] = []
    operands: list[str] = []
    values: dict[str, list[str]] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            operands.extend(words[i:])
            break
        if not word.startswith("-") or word == "-":
            operands.append(word)
            continue
        if word.startswith("--"):
            key, eq, value = word.partition("=")
            flags.append(key)
            if eq:
                values.setdefault(key, []).append(value)
            elif key in takes and i < len(words):
                values.setdefault(key, []).append(words[i])
                i += 1
            continue
        flags.append(word.split("=", 1)[0])
        for pos in range(1, len(word)):
            short = "-" + word[pos]
            flags.append(short)
            if short in takes:
                if pos + 1 < len(word):
                    values.setdefault(short, []).append(word[pos + 1:])
                elif i < len(words):
                    values.setdefault(short, []).append(words[i])
                    i += 1
                break
    return list(dict.fromkeys(flags)), operands, values
