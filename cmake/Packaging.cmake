# Debian packages from CMake's own packaging: `cpack -G DEB` in the build
# directory makes one package per install component,
#
#   railover          Runtime: librailover.so.0, railover, cprclient,
#                     railover-criu-action, railover-criu-tree,
#                     railover-restore, the benchmark scripts
#                     (share/railover/bench)
#   railover-dev      Development: include/railover/*.h, railover.pc,
#                     librailover.so
#   railover-openmpi  OpenMPI: mca_btl_railover.so and help-btl-railover.txt
#                     in Open MPI's component and help directories
#
# all below /usr (the RUNPATHs and railover.pc follow, cmake/Install.cmake).
# Dependencies: the runtime's from dpkg-shlibdeps, the others' on the
# runtime of the same version; the component's also on the Open MPI it was
# compiled against (mpi-btl/CMakeLists.txt).

set(CPACK_PACKAGE_NAME railover)
set(CPACK_PACKAGE_VENDOR "Railover")
set(CPACK_PACKAGE_CONTACT "Railover maintainers <maintainers@users.noreply.a-seed-d68af11a.example>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
# Stripped, as Debian's own packages are (a third of the size; the build
# tree keeps the symbols).
set(CPACK_STRIP_FILES ON)

set(CPACK_COMPONENTS_ALL Runtime Development)
if(TARGET mca_btl_railover)
  list(APPEND CPACK_COMPONENTS_ALL OpenMPI)
endif()
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)   # NAME_VERSION-REVISION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
# A shlibs file for librailover.so.0: packages built against it depend on
# railover (>= this version).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(_version "${CPACK_PACKAGE_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME railover)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
    "Railover: the library and its tools
librailover keeps message connections alive across rail failures (RDMA
verbs, UCX, TCP): it retains what the peer has not acknowledged, moves the
connection to the next rail and resends.  Tools: railover (info, status,
force, release, ctl, perf), cprclient (a job's checkpoint stages and its
restart), railover-restore (a restart's work on each host) and CRIU's action
scripts railover-criu-action and railover-criu-tree.")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
# python3: the benchmark scripts and railover-restore; criu: what the
# CRIU scripts and railover-restore serve.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "python3, criu")

set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME railover-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEVELOPMENT_DESCRIPTION
    "Railover: headers and pkg-config file
The public API (railover/railover.h, railover/ccp.h) and railover.pc:
cc app.c $(pkg-config --cflags --libs railover).")
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS "railover (= ${_version})")

set(CPACK_DEBIAN_OPENMPI_PACKAGE_NAME railover-openmpi)
set(CPACK_DEBIAN_OPENMPI_DESCRIPTION
    "Railover: the Open MPI BTL component
mca_btl_railover.so, installed with Open MPI's own components:
mpirun --mca pml ob1 --mca btl self,vader,railover ./app")
set(CPACK_DEBIAN_OPENMPI_PACKAGE_DEPENDS "railover (= ${_version})")
if(ROV_OMPI_DEB)
  string(APPEND CPACK_DEBIAN_OPENMPI_PACKAGE_DEPENDS ", ${ROV_OMPI_DEB}")
elseif(TARGET mca_btl_railover)
  message(STATUS "railover: the Debian package of Open MPI's libopen-pal was not found "
                 "(dpkg-query): railover-openmpi will not depend on it")
endif()

include(CPack)
