"""cfn-lint rules for every Lambda function of a template, after the SAM transform.

`make check-sam` passes this folder to cfn-lint with --append-rules. They stand in for
the Lambda rules of cfn-lint-serverless (awslabs/serverless-rules), which cannot be
installed here, and are stricter where Converge needs it: each rule names the one it
mirrors. They read the template after the SAM transform (cfn-lint transforms a SAM
template before its rules run), so they see AWS::Lambda::Function resources.
"""

from cfnlint.rules import CloudFormationLintRule, RuleMatch


def ref(value):
    """The logical id a Ref or Fn::GetAtt points at, or None."""
    if isinstance(value, dict) and len(value) == 1:
        if "Ref" in value and isinstance(value["Ref"], str):
            return value["Ref"]
        att = value.get("Fn::GetAtt")
        if isinstance(att, list) and att:
            return att[0]
        if isinstance(att, str):
            return att.split(".", 1)[0]
    return None


def as_list(value):
    return value if isinstance(value, list) else [value]


def props(resource):
    return resource.get("Properties", {}) or {}


class LambdaRule(CloudFormationLintRule):
    """Runs check(cfn, name, properties) on each AWS::Lambda::Function; each message
    it returns is a match on that function."""

    tags = ["lambda", "serverless"]

    def check(self, cfn, name, properties):
        raise NotImplementedError

    def match(self, cfn):
        return [
            RuleMatch(["Resources", name], f"Lambda function {name} {problem}")
            for name, fn in cfn.get_resources(["AWS::Lambda::Function"]).items()
            for problem in self.check(cfn, name, props(fn))
        ]


class Tracing(LambdaRule):
    id = "E9100"
    shortdesc = "Lambda tracing (serverless-rules WS1000)"
    description = "A Lambda function has X-Ray active tracing"
    source_url = "https://awslabs.github.io/serverless-rules/rules/lambda/tracing/"

    def check(self, cfn, name, properties):
        if properties.get("TracingConfig", {}).get("Mode") != "Active":
            yield "should have TracingConfig.Mode Active"


class LogGroup(LambdaRule):
    id = "E9101"
    shortdesc = "Lambda log group with retention (serverless-rules WS1004)"
    description = (
        "A Lambda function logs to a log group of the template that has a retention, and its "
        "execution role may write to no other log group"
    )
    source_url = "https://awslabs.github.io/serverless-rules/rules/lambda/log_retention/"

    def check(self, cfn, name, properties):
        groups = cfn.get_resources(["AWS::Logs::LogGroup"])
        group = ref(properties.get("LoggingConfig", {}).get("LogGroup"))
        if group not in groups:
            yield "should name a log group of this template in LoggingConfig.LogGroup"
        elif "RetentionInDays" not in props(groups[group]):
            yield f"logs to {group}, which has no RetentionInDays"
        role = cfn.get_resources(["AWS::IAM::Role"]).get(ref(properties.get("Role")))
        if role is None:
            yield "should run as an execution role of this template (SAM's own carries a managed policy writing to every log group)"
            return
        if props(role).get("ManagedPolicyArns"):
            yield "has an execution role with managed policies: grant logging on its log group only"
        for policy in as_list(props(role).get("Policies", [])):
            for st in as_list(policy.get("PolicyDocument", {}).get("Statement", [])):
                if not any(str(a).startswith("logs:") or a == "*" for a in as_list(st.get("Action", []))):
                    continue
                for res in as_list(st.get("Resource", [])):
                    if ref(res) not in groups:
                        yield f"has an execution role allowing logs actions on {res}, not a log group of this template"


class AsyncDestination(LambdaRule):
    id = "E9102"
    shortdesc = "Lambda on-failure destination for Event invokes (serverless-rules ES1007)"
    description = (
        "A Lambda function has an EventInvokeConfig with an on-failure destination and explicit "
        "retry and event-age limits (every function: Converge invokes an async endpoint with Event)"
    )
    source_url = "https://awslabs.github.io/serverless-rules/rules/lambda/async_failure_destination/"

    def check(self, cfn, name, properties):
        configs = [
            props(c)
            for c in cfn.get_resources(["AWS::Lambda::EventInvokeConfig"]).values()
            if ref(props(c).get("FunctionName")) == name
        ]
        if not configs:
            yield "should have an AWS::Lambda::EventInvokeConfig"
        for c in configs:
            if not c.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination"):
                yield "has an EventInvokeConfig without DestinationConfig.OnFailure.Destination"
            for key in ("MaximumRetryAttempts", "MaximumEventAgeInSeconds"):
                if key not in c:
                    yield f"has an EventInvokeConfig without {key}"


class ReservedConcurrency(LambdaRule):
    id = "E9103"
    shortdesc = "Lambda reserved concurrency"
    description = "A Lambda function sets ReservedConcurrentExecutions (a parameter may leave it unreserved)"
    source_url = "https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html"

    def check(self, cfn, name, properties):
        if "ReservedConcurrentExecutions" not in properties:
            yield "should set ReservedConcurrentExecutions"


def alarmed_metrics(alarm, function):
    """The (metric name, statistic) pairs of alarm's metrics on function."""
    p = props(alarm)
    found = []
    stat = p.get("ExtendedStatistic") or p.get("Statistic")
    if p.get("Namespace") == "AWS/Lambda" and any(
        d.get("Name") == "FunctionName" and ref(d.get("Value")) == function for d in as_list(p.get("Dimensions", []))
    ):
        found.append((p.get("MetricName"), stat))
    for m in as_list(p.get("Metrics", [])):
        ms = m.get("MetricStat", {})
        metric = ms.get("Metric", {})
        if metric.get("Namespace") == "AWS/Lambda" and any(
            d.get("Name") == "FunctionName" and ref(d.get("Value")) == function
            for d in as_list(metric.get("Dimensions", []))
        ):
            found.append((metric.get("MetricName"), ms.get("Stat")))
    return found


class Alarms(LambdaRule):
    id = "E9104"
    shortdesc = "Lambda alarms on errors, throttles and p99 duration"
    description = "A Lambda function has CloudWatch alarms on its Errors, Throttles and p99 Duration"
    source_url = "https://awslabs.github.io/serverless-rules/rules/lambda/"

    wanted = {"Errors": None, "Throttles": None, "Duration": "p99"}

    def check(self, cfn, name, properties):
        metrics = [m for a in cfn.get_resources(["AWS::CloudWatch::Alarm"]).values() for m in alarmed_metrics(a, name)]
        for metric, stat in self.wanted.items():
            if not any(m == metric and (stat is None or s == stat) for m, s in metrics):
                yield f"should have an alarm on {metric}" + (f" ({stat})" if stat else "")


class MemoryAndTimeout(LambdaRule):
    id = "E9105"
    shortdesc = "Lambda memory and timeout (serverless-rules ES1005, ES1006)"
    description = "A Lambda function sets MemorySize and Timeout rather than taking the defaults"
    source_url = "https://awslabs.github.io/serverless-rules/rules/lambda/default_timeout/"

    def check(self, cfn, name, properties):
        for key in ("MemorySize", "Timeout"):
            if key not in properties:
                yield f"should set {key}"


class StarPermissions(CloudFormationLintRule):
    id = "E9106"
    shortdesc = "Lambda role without wildcard actions (serverless-rules WS1003)"
    description = "An IAM role Lambda may assume allows no action by wildcard"
    source_url = "https://awslabs.github.io/serverless-rules/rules/lambda/star_permissions/"
    tags = ["lambda", "serverless", "iam"]

    def match(self, cfn):
        matches = []
        for name, role in cfn.get_resources(["AWS::IAM::Role"]).items():
            trust = as_list(props(role).get("AssumeRolePolicyDocument", {}).get("Statement", []))
            services = [s for st in trust for s in as_list(st.get("Principal", {}).get("Service", []))]
            if "lambda.amazonaws.com" not in services:
                continue
            for policy in as_list(props(role).get("Policies", [])):
                for st in as_list(policy.get("PolicyDocument", {}).get("Statement", [])):
                    for action in as_list(st.get("Action", [])):
                        if action == "*" or str(action).endswith(":*"):
                            matches.append(
                                RuleMatch(["Resources", name], f"IAM role {name}, assumed by Lambda, allows {action}")
                            )
        return matches
