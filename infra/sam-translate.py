"""Prints template.yaml as AWS SAM translates it (the CloudFormation `sam deploy` sends), as JSON.

The tests read the roles SAM makes from it (`tests/tests/e2e/template.rs`): what SAM adds on its
own — a managed policy for an event source, say — is seen there, not only what the template
says. Offline: the functions' code is a placeholder S3 location, as `sam package` would write,
and no managed policy name is looked up.

Usage: .venv/bin/python infra/sam-translate.py template.yaml
"""

import json
import os
import sys

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse


class NoLookups:
    """The managed policy names SAM may look up: none are named by the template."""

    def load(self):
        return {}


def main(path):
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with open(path, encoding="utf-8") as file:
        template = yaml_parse(file.read())
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = "s3://bucket/key"
    json.dump(transform(template, {}, NoLookups()), sys.stdout, indent=1, default=str)


if __name__ == "__main__":
    main(sys.argv[1])
