"""Entry point of the opbroker policy pack (``PulumiPolicy.yaml`` beside it).

Only here is the ``PolicyPack`` built: its constructor starts the analyzer's gRPC server. The policies
themselves live in ``opbroker.provider.policies`` and are tested by calling them directly.
"""

from pulumi_policy import EnforcementLevel, PolicyPack

from opbroker.provider import policies

PolicyPack(name="opbroker", enforcement_level=EnforcementLevel.MANDATORY, policies=policies.POLICIES)
