"""Puts the Java bridge jar into the package: from ../target, else built with ../mvnw."""
import pathlib
import shutil
import subprocess

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

JAR = "meltano-clickhouse-bridge.jar"


class BridgeJarHook(BuildHookInterface):
    def initialize(self, version, build_data):
        shim = pathlib.Path(self.root)
        target = shim / "src" / "meltano_state_backend_clickhouse" / "bridge" / JAR
        repo = shim.parent
        built = repo / "target" / JAR
        if not built.exists():
            if not (repo / "mvnw").exists():
                if target.exists():
                    return
                raise RuntimeError(f"{JAR} is missing and there is no Maven project beside {shim} to build it")
            subprocess.run([str(repo / "mvnw"), "-q", "-B", "package", "-DskipTests"], cwd=repo, check=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)
