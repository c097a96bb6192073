package dev.inpath.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** One statement on one server: a page range with the pushed work. */
final class InpathPartition implements InputPartition {
  private static final long serialVersionUID = 1L;
  final int index;
  final String uri;
  final String host;
  final String sql;

  InpathPartition(int index, String uri, String host, String sql) {
    this.index = index;
    this.uri = uri;
    this.host = host;
    this.sql = sql;
  }

  @Override
  public String[] preferredLocations() {
    return new String[] {host};
  }
}
