#!/usr/bin/env bash
# Builds the Spark connector's one jar, target/inpath-spark.jar, and prints its path.
#
# Idempotent: when the jar is newer than every source and the dependency list, it only prints
# the path (about a second). Otherwise:
#   1. the Flight client's jars (pom.xml: Arrow flight-core 19.0.0 and its gRPC and protobuf,
#      without what Spark ships) are copied once by Maven into target/lib, Maven's own
#      repository kept in target/m2, so the cache is this directory's and nothing else's;
#   2. javac (release 17) compiles src/main/java against pyspark's jars and target/lib;
#   3. the classes, the services file and target/lib's classes are put in one jar (the
#      META-INF/services files of the gRPC jars concatenated, signatures dropped), so Spark
#      needs only `--jars target/inpath-spark.jar`.
#
# The pyspark jars: $PYSPARK_JARS, else the repository's .venv, else pyspark of $INPATH_PYTHON
# (or python3).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"
jar="$here/target/inpath-spark.jar"

spark_jars="${PYSPARK_JARS:-}"
if [ -z "$spark_jars" ]; then
  for d in "$root"/.venv/lib/python3*/site-packages/pyspark/jars; do
    [ -d "$d" ] && spark_jars="$d"
  done
fi
if [ -z "$spark_jars" ]; then
  spark_jars="$("${INPATH_PYTHON:-python3}" -c \
    'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
fi
[ -d "$spark_jars" ] || { echo "build.sh: no pyspark jars at $spark_jars" >&2; exit 1; }

# 1. The Flight client's jars, once (or again when pom.xml changes).
if [ ! -f target/lib/.done ] || [ pom.xml -nt target/lib/.done ]; then
  rm -rf target/lib
  mvn -q -B -Dstyle.color=never -Dmaven.repo.local="$here/target/m2" dependency:copy-dependencies \
    -DoutputDirectory=target/lib -DincludeScope=runtime >&2
  touch target/lib/.done
fi

# Warm: nothing newer than the jar.
if [ -f "$jar" ] && [ -z "$(find src build.sh target/lib/.done -newer "$jar" -print -quit)" ]; then
  echo "$jar"
  exit 0
fi

# 2. Compile.
rm -rf target/classes target/fat target/services
mkdir -p target/classes target/fat
find src/main/java -name '*.java' > target/sources.txt
javac --release 17 -Xlint:all,-serial,-options,-processing,-path,-try,-classfile -Werror -encoding UTF-8 \
  -d target/classes -cp "$spark_jars/*:target/lib/*" @target/sources.txt >&2
cp -r src/main/resources/. target/classes/

# 3. One jar: the dependencies' classes, the connector's, the services files joined.
(
  cd target/fat
  mkdir -p ../services
  for dep in ../lib/*.jar ../classes; do
    if [ -d "$dep" ]; then cp -r "$dep"/. .; else unzip -qqo "$dep"; fi
    if [ -d META-INF/services ]; then
      for f in META-INF/services/*; do
        cat "$f" >> "../services/$(basename "$f")"
        echo >> "../services/$(basename "$f")"
      done
      rm -rf META-INF/services
    fi
  done
  rm -f META-INF/*.SF META-INF/*.RSA META-INF/*.DSA META-INF/MANIFEST.MF module-info.class
  rm -f META-INF/versions/*/module-info.class
  mkdir -p META-INF/services
  cp ../services/* META-INF/services/
)
rm -rf target/services
jar --create --file "$jar.tmp" -C target/fat .
mv "$jar.tmp" "$jar"
echo "$jar"
