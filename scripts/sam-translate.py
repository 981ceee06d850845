#!/usr/bin/env python3
"""Translate a SAM template into plain CloudFormation JSON on stdout.

    scripts/sam-translate.py [--code-bucket BUCKET] [--region REGION] [TEMPLATE]

TEMPLATE defaults to template.yaml. A function's local CodeUri (a folder such as
functions/quickstart) becomes s3://BUCKET/<that folder>: the key under which the
caller uploads the folder's package, as `sam package` would. The translation is
aws-sam-translator's, the library CloudFormation's own transform runs; the
managed policies it may name come from its bundled list, so nothing reaches AWS.
"""

import argparse
import json
import os
import sys

from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("template", nargs="?", default="template.yaml")
    ap.add_argument("--code-bucket", default="code-bucket",
                    help="the bucket local CodeUri folders are uploaded to (default: code-bucket)")
    ap.add_argument("--region", default="us-east-1", help="the region ARNs are generated for")
    args = ap.parse_args()
    os.environ["AWS_DEFAULT_REGION"] = args.region

    with open(args.template, encoding="utf-8") as f:
        sam = yaml_parse(f.read())
    for res in sam.get("Resources", {}).values():
        props = res.get("Properties", {})
        uri = props.get("CodeUri")
        if res.get("Type") == "AWS::Serverless::Function" and isinstance(uri, str) and not uri.startswith("s3://"):
            props["CodeUri"] = f"s3://{args.code_bucket}/{uri}"

    cfn = Translator(managed_policy_map=None, sam_parser=Parser()).translate(
        sam_template=sam, parameter_values={}, passthrough_metadata=True)
    json.dump(cfn, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
