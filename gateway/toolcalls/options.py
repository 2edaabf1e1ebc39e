"""Command arguments -> flags, operands and option values (`parse_options`), getopt style.

Pure. A per-command table names the options that take a separate argument, so option values are not
mistaken for operands (`git -C dir status`, `curl -o out URL`).
"""
from __future__ import annotations

# command -> options that take a separate argument (for telling operands from option values)
_ARG_OPTIONS: dict[str, frozenset[str]] = {name: frozenset(text.split()) for name, text in {
    "git": "-C -c --git-dir --work-tree --namespace --exec-path -o --push-option --repo --receive-pack --exec "
           "-m -F --message --file -b -B --branch --author --date --reference --depth --config --upload-pack "
           "--origin --template --separate-git-dir --jobs --filter --shallow-since --shallow-exclude "
           "--strategy --strategy-option --onto --format --pretty --since --until --grep --committer "
           "--max-count --extcmd --tool",
    "kubectl": "-n --namespace --context --cluster --kubeconfig -s --server --user --token -f --filename "
               "-l --selector -o --output -c --container --field-selector --type -p --patch --replicas "
               "--image --timeout --grace-period --as --as-group --request-timeout",
    "helm": "-n --namespace --kube-context --kubeconfig -f --values --set --set-string --set-file --version "
            "--repo -o --output --timeout --post-renderer",
    "docker": "-H --host --context --config -f --file -t --tag -e --env -v --volume -p --publish -w --workdir "
              "--name --network -u --user --entrypoint --platform -l --label --log-level --env-file --mount "
              "--filter --format --project-name --profile --build-arg --target --cpus -m --memory",
    "curl": "-X --request -d --data --data-raw --data-binary --data-urlencode --data-ascii --json -F --form "
            "--form-string -H --header -o --output -u --user -A --user-agent -e --referer -b --cookie -c "
            "--cookie-jar -T --upload-file -x --proxy -U --proxy-user -m --max-time --connect-timeout -w "
            "--write-out -K --config -E --cert --key --cacert --capath -r --range -C --continue-at --resolve "
            "--connect-to --retry --retry-delay --retry-max-time -y -Y --limit-rate --interface --url -z "
            "--time-cond --max-filesize -P --ftp-port --oauth2-bearer --proto --proto-redir -Q --quote "
            "--unix-socket --dns-servers --local-port -t --telnet-option --variable --output-dir -D "
            "--dump-header --trace --trace-ascii --stderr --etag-save --libcurl",
    "wget": "-O -o -a -P -U -e -t -T -i -B --output-document --output-file --post-data --post-file --method "
            "--body-data --body-file --header --user-agent --directory-prefix --tries --timeout --user "
            "--password --input-file --use-askpass --append-output",
    "psql": "-c --command -d --dbname -h --host -p --port -U --username -f --file -v --set --variable -o "
            "--output -L --log-file -P --pset -F -R",
    "mysql": "-e --execute -u --user -h --host -P --port -D --database -S --socket --default-character-set "
             "--pager --tee",
    "sqlite3": "-cmd -init -separator -nullvalue -newline -vfs -mmap -lookaside -pagecache -heap -maxsize",
    "duckdb": "-c -cmd -s -init -f -separator -nullvalue -newline",
    "clickhouse-client": "-q --query --queries-file -h --host --port -u --user -d --database --password",
    "cqlsh": "-e --execute -f --file -u --username -p --password -k --keyspace",
    "sqlcmd": "-Q -q -i -S -U -P -d -o",
    "snowsql": "-q --query -f --filename -a --accountname -u --username -d --dbname -s --schemaname",
    "trino": "--execute -f --file --server --catalog --schema --user",
    "spark-sql": "-e -f", "beeline": "-e -f -u -n -p", "hive": "-e -f",
    "impala-shell": "-q --query -f --query_file -i --impalad",
    "usql": "-c --command -f --file",
    "mongo": "--eval --host --port -u --username -p --password --authenticationDatabase",
    "mongosh": "--eval -f --file --host --port -u --username -p --password --authenticationDatabase",
    "redis-cli": "-h -p -s -a -u -n -r -i -d -D --user --pass --cacert --cert --key --pattern --count --eval",
    "truncate": "-s --size -r --reference",
    "shred": "-n --iterations -s --size --random-source",
    "gcloud": "--project --region --zone --account --configuration --format --filter --flags-file "
              "--impersonate-service-account --verbosity --billing-project --image --machine-type --source",
    "aws": "--region --profile --output --endpoint-url --query --cli-input-json --cli-input-yaml --ca-bundle "
           "--color --cli-read-timeout --cli-connect-timeout --bucket --key --instance-ids --function-name "
           "--stack-name --table-name --cluster --service --db-instance-identifier",
    "az": "-g --resource-group -n --name --subscription -o --output --query -l --location --ids",
    "gh": "-R --repo -X --method -f --field -F --raw-field -H --header --hostname -q --jq -t --template "
          "--json -b --body -t --title -B --base -L --limit --input",
    "glab": "-R --repo -X --method -f --field -F --raw-field -H --header --hostname",
    "doctl": "-t --access-token --context -o --output --format --config",
    "heroku": "-a --app -r --remote",
    "fly": "-a --app -c --config -r --region -t --access-token -i --image",
    "flyctl": "-a --app -c --config -r --region -t --access-token -i --image",
    "vercel": "-t --token -S --scope --cwd -A --local-config -e --env -b --build-env -m --meta",
    "netlify": "-s --site --auth -d --dir -f --functions -a --alias -m --message",
    "firebase": "-P --project --token --account",
    "pulumi": "-s --stack -C --cwd --config-file",
    "terraform": "-chdir -var -var-file -target -out -state -lock-timeout -parallelism",
    "tofu": "-chdir -var -var-file -target -out -state -lock-timeout -parallelism",
    "sed": "-e -f --expression --file -l --line-length",
    "cp": "-t --target-directory -S --suffix",
    "mv": "-t --target-directory -S --suffix",
    "ln": "-t --target-directory -S --suffix",
    "install": "-t --target-directory -S --suffix -m --mode -o --owner -g --group",
    "rsync": "-e --rsh --rsync-path --exclude --include --filter -f --files-from --log-file --backup-dir "
             "--partial-dir --temp-dir -T --compare-dest --copy-dest --link-dest --chmod --chown "
             "--password-file --port --timeout --bwlimit --max-size --min-size --suffix --exclude-from "
             "--include-from --out-format --log-file-format -M --remote-option",
    "scp": "-P -i -o -F -S -l -c -J -D",
    "sftp": "-P -i -o -F -S -l -c -J -D -b -B -R -s",
    "ssh": "-p -i -o -F -l -L -R -D -J -W -b -c -e -m -O -Q -S -w -B -E -I",
    "rg": "--pre --pre-glob -e --regexp -f --file -g --glob -t --type -T --type-not -A -B -C -m "
          "--max-count -j --threads --sort --sortr -E --encoding -r --replace",
    "grep": "-e --regexp -f --file -A -B -C -m --max-count --include --exclude --exclude-dir --label",
    "man": "-P --pager -H --html -M --manpath -S -s --sections -C --config-file -L --locale",
    "tar": "-f --file -C --directory -I --use-compress-program --to-command -F --info-script "
           "--new-volume-script --rsh-command -T --files-from -X --exclude-from --exclude -b -N --newer "
           "--transform --xform --owner --group --mode --strip-components --checkpoint-action",
    "unzip": "-d -x -P",
    "zip": "-TT --unzip-command -b -n -P -t -tt -x -i",
    "sort": "--compress-program -o --output -S --buffer-size -T --temporary-directory -k --key -t "
            "--field-separator --parallel",
    "fzf": "--preview --bind -q --query --preview-window --height --delimiter -d -f --filter",
    "make": "-C --directory -f --file --makefile -I --include-dir -o --old-file -W --what-if -j --jobs",
    "find": "",
    "tee": "",
    "chmod": "--reference", "chown": "--reference", "chgrp": "--reference",
    "dd": "",
    "nix": "--file -f --expr --arg --argstr",
    "npm": "--prefix -w --workspace --registry",
}.items()}
for _alias, _same in {"mariadb": "mysql", "podman": "docker", "sqlite": "sqlite3", "presto": "trino",
                      "gsed": "sed", "tofu": "terraform", "gtar": "tar", "bsdtar": "tar"}.items():
    _ARG_OPTIONS[_alias] = _ARG_OPTIONS[_same]


# commands whose options are long words after a single dash (`terraform apply -auto-approve`)
_SINGLE_DASH_LONG = frozenset({"terraform", "tofu", "terragrunt", "find", "java", "go"})


def parse_options(name: str, words: list[str]) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(flags, operands, option values) of a command's arguments, getopt style, per-command option table."""
    takes = _ARG_OPTIONS.get(name, frozenset())
    single_dash_long = name in _SINGLE_DASH_LONG
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
        if word.startswith("--") or single_dash_long or (len(word) > 2 and word.split("=", 1)[0] in takes):
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
