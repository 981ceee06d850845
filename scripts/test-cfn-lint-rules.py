#!/usr/bin/env python3
"""Checks that scripts/cfn-lint-rules catches what it is there to catch.

    scripts/test-cfn-lint-rules.py TEMPLATE.json

TEMPLATE.json is a translated SAM template (scripts/sam-translate.py's output) that
passes the rules. Each case removes or widens one setting of one Lambda function (the
functions take turns) and expects the rule guarding it to report that function; the
template as given must report nothing. `make check-sam` runs it after the translation,
so a rule that stops matching fails CI, not only a template that stops complying.
"""

import copy
import json
import os
import sys

from cfnlint.config import ConfigMixIn
from cfnlint.rules import Rules
from cfnlint.runner.template.runner import run_template_by_data

RULES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cfn-lint-rules")


def by_type(resources, typ):
    return {k: v for k, v in resources.items() if v["Type"] == typ}


def points_at(value, name):
    return value in ({"Ref": name}, {"Fn::GetAtt": [name, "Arn"]})


def role(resources, fn):
    return resources[fn]["Properties"]["Role"]["Fn::GetAtt"][0]


def statements(resources, fn):
    return [st for p in resources[role(resources, fn)]["Properties"]["Policies"] for st in p["PolicyDocument"]["Statement"]]


def event_invoke_config(resources, fn):
    return next(
        k
        for k, v in by_type(resources, "AWS::Lambda::EventInvokeConfig").items()
        if points_at(v["Properties"]["FunctionName"], fn)
    )


def alarm_on(resources, fn, metric):
    for k, v in by_type(resources, "AWS::CloudWatch::Alarm").items():
        p = v["Properties"]
        metrics = [p] + [m["MetricStat"]["Metric"] for m in p.get("Metrics", []) if "MetricStat" in m]
        for m in metrics:
            if m.get("MetricName") == metric and any(points_at(d["Value"], fn) for d in m.get("Dimensions", [])):
                return k
    raise KeyError(f"no {metric} alarm on {fn}")


def log_statement(resources, fn):
    return next(st for st in statements(resources, fn) if st["Action"][0].startswith("logs:"))


# (rule, what the case does, the mutation of Resources for function fn)
CASES = [
    ("E9100", "tracing off", lambda r, fn: r[fn]["Properties"].pop("TracingConfig")),
    ("E9101", "no LoggingConfig", lambda r, fn: r[fn]["Properties"].pop("LoggingConfig")),
    (
        "E9101",
        "log group without retention",
        lambda r, fn: r[r[fn]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]]["Properties"].pop("RetentionInDays"),
    ),
    ("E9101", "logs allowed on *", lambda r, fn: log_statement(r, fn).update(Resource="*")),
    ("E9101", "a managed policy on the role", lambda r, fn: r[r[fn]["Properties"]["Role"]["Fn::GetAtt"][0]]["Properties"].update(
        ManagedPolicyArns=["arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"])),
    ("E9102", "no EventInvokeConfig", lambda r, fn: r.pop(event_invoke_config(r, fn))),
    ("E9102", "no on-failure destination", lambda r, fn: r[event_invoke_config(r, fn)]["Properties"].pop("DestinationConfig")),
    ("E9102", "Lambda's default retries", lambda r, fn: r[event_invoke_config(r, fn)]["Properties"].pop("MaximumRetryAttempts")),
    ("E9102", "Lambda's default event age", lambda r, fn: r[event_invoke_config(r, fn)]["Properties"].pop("MaximumEventAgeInSeconds")),
    ("E9103", "no reserved concurrency", lambda r, fn: r[fn]["Properties"].pop("ReservedConcurrentExecutions")),
    ("E9104", "no Errors alarm", lambda r, fn: r.pop(alarm_on(r, fn, "Errors"))),
    ("E9104", "no Throttles alarm", lambda r, fn: r.pop(alarm_on(r, fn, "Throttles"))),
    ("E9104", "no Duration alarm", lambda r, fn: r.pop(alarm_on(r, fn, "Duration"))),
    ("E9105", "default memory", lambda r, fn: r[fn]["Properties"].pop("MemorySize")),
    ("E9105", "default timeout", lambda r, fn: r[fn]["Properties"].pop("Timeout")),
    ("E9106", "a wildcard action", lambda r, fn: log_statement(r, fn).update(Action="logs:*")),
]


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        template = json.load(f)
    # Only these rules run: cfn-lint's own have checked the template already.
    rules = Rules.create_from_directory(RULES)
    config = ConfigMixIn(["--regions", "us-east-1"])

    def ours(t):
        return list(run_template_by_data(t, config, rules))

    failed = [f"the template as given: {m.rule.id} {m.message}" for m in ours(template)]
    functions = sorted(by_type(template["Resources"], "AWS::Lambda::Function"))
    for i, (rule, what, mutate) in enumerate(CASES):
        fn = functions[i % len(functions)]
        t = copy.deepcopy(template)
        mutate(t["Resources"], fn)
        if not any(m.rule.id == rule and m.path[:2] in (["Resources", fn], ["Resources", role(t["Resources"], fn)]) for m in ours(t)):
            failed.append(f"{what} on {fn}: {rule} did not report it")
    for f in failed:
        print(f"test-cfn-lint-rules: {f}", file=sys.stderr)
    if failed:
        return 1
    print(f"test-cfn-lint-rules: {len(CASES)} cases, each reported by its rule")
    return 0


if __name__ == "__main__":
    sys.exit(main())
